// The host backend's reduction. Conversions give the device's bits: decoding
// uses tables built from CUDA's own host-callable conversions, encoding is
// CUDA's round-to-nearest-even written with integer operations (checked bit
// for bit against CUDA's encoders). The ops mirror src/kernels/reduce_ops.cuh,
// which is device-only.
#include "transport/host/host_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

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

// A value of T with the given bit pattern, through CUDA's raw types.
template <typename T>
inline T fromBits(uint32_t bits) {
  if constexpr (std::is_same<T, __half>::value) {
    __half_raw r;
    r.x = static_cast<unsigned short>(bits);
    return __half(r);
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    __nv_bfloat16_raw r;
    r.x = static_cast<unsigned short>(bits);
    return __nv_bfloat16(r);
  } else {
    T v;
    v.__x = static_cast<__nv_fp8_storage_t>(bits);
    return v;
  }
}

// CUDA's host conversions are exact but slow (a few to tens of ns each).
// Decoding goes through tables built once from them, so it stays exact;
// encoding is round-to-nearest-even written out with integer operations.
template <typename T>
const float* decodeTable() {
  static const std::vector<float> table = [] {
    constexpr size_t kValues = size_t(1) << (8 * sizeof(T));
    std::vector<float> t(kValues);
    for (size_t bits = 0; bits < kValues; ++bits) t[bits] = static_cast<float>(fromBits<T>(uint32_t(bits)));
    return t;
  }();
  return table.data();
}

template <typename T>
inline float decode(T v) {
  typename std::conditional<sizeof(T) == 1, uint8_t, uint16_t>::type bits;
  std::memcpy(&bits, &v, sizeof v);
  return decodeTable<T>()[bits];
}

// Float to a small float format (E exponent bits, M mantissa bits), rounding
// to nearest even. Beyond the largest finite code: inf (kSat false) or the
// largest finite (kSat true). NaN becomes kNaN.
template <int E, int M, bool kSat, uint32_t kMaxFinite, uint32_t kInf, uint32_t kNaN>
inline uint32_t encodeSmallFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 31) << (E + M);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return kNaN;
  const int bias = (1 << (E - 1)) - 1;
  const int emin = 1 - bias;
  const int e = int(a >> 23) - 127;
  uint32_t q;
  if (a == 0) return sign;
  if (e < emin) {  // subnormal in the target (or zero after rounding)
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const int sh = 23 + emin - M - e;
    if (sh > 25) return sign;
    const uint32_t rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    q = m >> sh;
    if (rem > half || (rem == half && (q & 1u))) ++q;
  } else {
    const int sh = 23 - M;
    const uint32_t m = a & 0x7fffffu;
    if (e + bias > (1 << E)) return sign | (kSat ? kMaxFinite : kInf);
    q = (uint32_t(e + bias) << M) | (m >> sh);
    const uint32_t rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
  }
  if (q > kMaxFinite) q = kSat ? kMaxFinite : kInf;
  return sign | q;
}

// fp16 overflows to infinity like __float2half_rn; fp8 saturates to the
// largest finite value like __nv_fp8_e4m3(float) / __nv_fp8_e5m2(float).
// Checked bit for bit against CUDA's encoders on 30 M floats.
template <> struct Traits<__half> {
  using AccT = float;
  static float toAcc(__half v) { return decode(v); }
  static __half fromAcc(float v) {
    return fromBits<__half>(encodeSmallFloat<5, 10, false, 0x7bff, 0x7c00, 0x7fff>(v));
  }
};
template <> struct Traits<__nv_bfloat16> {
  using AccT = float;
  static float toAcc(__nv_bfloat16 v) {
    uint16_t bits;
    std::memcpy(&bits, &v, 2);
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static __nv_bfloat16 fromAcc(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return fromBits<__nv_bfloat16>((u & 0x7fffffffu) > 0x7f800000u
                                       ? 0x7fffu  // NaN, as CUDA returns it
                                       : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};
template <> struct Traits<__nv_fp8_e4m3> {
  using AccT = float;
  static float toAcc(__nv_fp8_e4m3 v) { return decode(v); }
  static __nv_fp8_e4m3 fromAcc(float v) {
    return fromBits<__nv_fp8_e4m3>(encodeSmallFloat<4, 3, true, 0x7e, 0x7e, 0x7f>(v));
  }
};
template <> struct Traits<__nv_fp8_e5m2> {
  using AccT = float;
  static float toAcc(__nv_fp8_e5m2 v) { return decode(v); }
  static __nv_fp8_e5m2 fromAcc(float v) {
    return fromBits<__nv_fp8_e5m2>(encodeSmallFloat<5, 2, true, 0x7b, 0x7b, 0x7f>(v));
  }
};

// Integer + and * wrap through the unsigned type instead of overflowing.
template <rcnRedOp_t Op, typename A>
inline A combine(A a, A b) {
  if constexpr (Op == rcnSum || Op == rcnAvg || Op == rcnProd) {
    if constexpr (std::is_integral<A>::value) {
      using U = typename std::make_unsigned<A>::type;
      return Op == rcnProd ? static_cast<A>(static_cast<U>(a) * static_cast<U>(b))
                           : static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return Op == rcnProd ? a * b : a + b;
    }
  } else if constexpr (Op == rcnMax) {
    return b > a ? b : a;  // a comparison keeps the first NaN, like the kernels
  } else {
    return b < a ? b : a;
  }
}

// Rank by rank over a tile of accumulators (rank order is kept per element),
// so the inner loops are simple enough for the compiler to vectorize.
template <typename T, rcnRedOp_t Op>
void reduceTyped(const void* const* inputs, int nranks, void* out, size_t count) {
  using Tr = Traits<T>;
  using Acc = typename Tr::AccT;
  constexpr size_t kTile = 256;
  Acc acc[kTile];
  T* dst = static_cast<T*>(out);
  for (size_t base = 0; base < count; base += kTile) {
    const size_t n = count - base < kTile ? count - base : kTile;
    const T* first = static_cast<const T*>(inputs[0]) + base;
    for (size_t i = 0; i < n; ++i) acc[i] = Tr::toAcc(first[i]);
    for (int r = 1; r < nranks; ++r) {
      const T* in = static_cast<const T*>(inputs[r]) + base;
      for (size_t i = 0; i < n; ++i) acc[i] = combine<Op>(acc[i], Tr::toAcc(in[i]));
    }
    if constexpr (Op == rcnAvg)
      for (size_t i = 0; i < n; ++i) acc[i] = acc[i] / static_cast<Acc>(nranks);
    for (size_t i = 0; i < n; ++i) dst[base + i] = Tr::fromAcc(acc[i]);
  }
}

template <typename T>
void reduceOp(const void* const* inputs, int nranks, void* out, size_t count, rcnRedOp_t op) {
  switch (op) {
    case rcnSum: return reduceTyped<T, rcnSum>(inputs, nranks, out, count);
    case rcnProd: return reduceTyped<T, rcnProd>(inputs, nranks, out, count);
    case rcnMax: return reduceTyped<T, rcnMax>(inputs, nranks, out, count);
    case rcnMin: return reduceTyped<T, rcnMin>(inputs, nranks, out, count);
    case rcnAvg: return reduceTyped<T, rcnAvg>(inputs, nranks, out, count);
    default: return;
  }
}

}  // namespace

void hostReduce(const void* const* inputs, int nranks, void* out, size_t count,
                rcnDataType_t dtype, rcnRedOp_t op) {
  switch (dtype) {
    case rcnInt8: return reduceOp<int8_t>(inputs, nranks, out, count, op);
    case rcnUint8: return reduceOp<uint8_t>(inputs, nranks, out, count, op);
    case rcnInt32: return reduceOp<int32_t>(inputs, nranks, out, count, op);
    case rcnUint32: return reduceOp<uint32_t>(inputs, nranks, out, count, op);
    case rcnInt64: return reduceOp<int64_t>(inputs, nranks, out, count, op);
    case rcnUint64: return reduceOp<uint64_t>(inputs, nranks, out, count, op);
    case rcnFloat16: return reduceOp<__half>(inputs, nranks, out, count, op);
    case rcnFloat32: return reduceOp<float>(inputs, nranks, out, count, op);
    case rcnFloat64: return reduceOp<double>(inputs, nranks, out, count, op);
    case rcnBfloat16: return reduceOp<__nv_bfloat16>(inputs, nranks, out, count, op);
    case rcnFloat8e4m3: return reduceOp<__nv_fp8_e4m3>(inputs, nranks, out, count, op);
    case rcnFloat8e5m2: return reduceOp<__nv_fp8_e5m2>(inputs, nranks, out, count, op);
    default: return;
  }
}

}  // namespace rcn
