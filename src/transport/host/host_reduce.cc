// Host conversions come from CUDA's own fp16/bf16/fp8 headers (their
// conversion functions are host-callable), so rounding matches the device.
// The ops mirror src/kernels/reduce_ops.cuh, which is device-only.
#include "transport/host/host_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace rcn {

namespace {

template <typename T, typename Acc>
struct Plain {
  using AccT = Acc;
  static Acc toAcc(T v) { return static_cast<Acc>(v); }
  static T fromAcc(Acc v) { return static_cast<T>(v); }
};
template <typename T> struct Traits;
template <> struct Traits<int8_t> : Plain<int8_t, int32_t> {};
template <> struct Traits<uint8_t> : Plain<uint8_t, uint32_t> {};
template <> struct Traits<int32_t> : Plain<int32_t, int32_t> {};
template <> struct Traits<uint32_t> : Plain<uint32_t, uint32_t> {};
template <> struct Traits<int64_t> : Plain<int64_t, int64_t> {};
template <> struct Traits<uint64_t> : Plain<uint64_t, uint64_t> {};
template <> struct Traits<float> : Plain<float, float> {};
template <> struct Traits<double> : Plain<double, double> {};
template <> struct Traits<__half> {
  using AccT = float;
  static float toAcc(__half v) { return __half2float(v); }
  static __half fromAcc(float v) { return __float2half_rn(v); }
};
template <> struct Traits<__nv_bfloat16> {
  using AccT = float;
  static float toAcc(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __nv_bfloat16 fromAcc(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Traits<__nv_fp8_e4m3> {
  using AccT = float;
  static float toAcc(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
  static __nv_fp8_e4m3 fromAcc(float v) { return __nv_fp8_e4m3(v); }
};
template <> struct Traits<__nv_fp8_e5m2> {
  using AccT = float;
  static float toAcc(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
  static __nv_fp8_e5m2 fromAcc(float v) { return __nv_fp8_e5m2(v); }
};

// Integer + and * wrap through the unsigned type instead of overflowing.
template <typename A>
A combine(rcnRedOp_t op, A a, A b) {
  if constexpr (std::is_integral<A>::value) {
    using U = typename std::make_unsigned<A>::type;
    if (op == rcnSum || op == rcnAvg) return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    if (op == rcnProd) return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    if (op == rcnSum || op == rcnAvg) return a + b;
    if (op == rcnProd) return a * b;
  }
  if (op == rcnMax) return b > a ? b : a;  // a comparison keeps the first NaN, like the kernels
  return b < a ? b : a;
}

template <typename T>
void reduceTyped(const void* const* inputs, int nranks, void* out, size_t count, rcnRedOp_t op) {
  using Tr = Traits<T>;
  using Acc = typename Tr::AccT;
  T* dst = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    Acc acc = Tr::toAcc(static_cast<const T*>(inputs[0])[i]);
    for (int r = 1; r < nranks; ++r) acc = combine(op, acc, Tr::toAcc(static_cast<const T*>(inputs[r])[i]));
    if (op == rcnAvg) acc = acc / static_cast<Acc>(nranks);
    dst[i] = Tr::fromAcc(acc);
  }
}

}  // namespace

void hostReduce(const void* const* inputs, int nranks, void* out, size_t count,
                rcnDataType_t dtype, rcnRedOp_t op) {
  switch (dtype) {
    case rcnInt8: return reduceTyped<int8_t>(inputs, nranks, out, count, op);
    case rcnUint8: return reduceTyped<uint8_t>(inputs, nranks, out, count, op);
    case rcnInt32: return reduceTyped<int32_t>(inputs, nranks, out, count, op);
    case rcnUint32: return reduceTyped<uint32_t>(inputs, nranks, out, count, op);
    case rcnInt64: return reduceTyped<int64_t>(inputs, nranks, out, count, op);
    case rcnUint64: return reduceTyped<uint64_t>(inputs, nranks, out, count, op);
    case rcnFloat16: return reduceTyped<__half>(inputs, nranks, out, count, op);
    case rcnFloat32: return reduceTyped<float>(inputs, nranks, out, count, op);
    case rcnFloat64: return reduceTyped<double>(inputs, nranks, out, count, op);
    case rcnBfloat16: return reduceTyped<__nv_bfloat16>(inputs, nranks, out, count, op);
    case rcnFloat8e4m3: return reduceTyped<__nv_fp8_e4m3>(inputs, nranks, out, count, op);
    case rcnFloat8e5m2: return reduceTyped<__nv_fp8_e5m2>(inputs, nranks, out, count, op);
    default: return;
  }
}

}  // namespace rcn
