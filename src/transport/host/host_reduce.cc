// SPDX-License-Identifier: BSD-3-Clause
// The host backend's reduction. The ops and the integer, fp32 and fp64
// traits are the kernels' own (kernels/reduce_ops.cuh). Conversions of the
// 16- and 8-bit floats give the device's bits faster than CUDA's host
// conversions: decoding uses tables built from those conversions, encoding is
// CUDA's round-to-nearest-even written with integer operations (checked bit
// for bit against CUDA's encoders).
#include "transport/host/host_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/reduce_ops.cuh"

namespace rcn {

namespace {

// Integers, fp32 and fp64 convert as in the kernels; the 16- and 8-bit
// floats are specialized below.
template <typename T> struct Traits : ElemTraits<T> {};

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
  using Acc = float;
  static float toAcc(__half v) { return decode(v); }
  static __half fromAcc(float v) {
    return fromBits<__half>(encodeSmallFloat<5, 10, false, 0x7bff, 0x7c00, 0x7fff>(v));
  }
};
template <> struct Traits<__nv_bfloat16> {
  using Acc = float;
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
  using Acc = float;
  static float toAcc(__nv_fp8_e4m3 v) { return decode(v); }
  static __nv_fp8_e4m3 fromAcc(float v) {
    return fromBits<__nv_fp8_e4m3>(encodeSmallFloat<4, 3, true, 0x7e, 0x7e, 0x7f>(v));
  }
};
template <> struct Traits<__nv_fp8_e5m2> {
  using Acc = float;
  static float toAcc(__nv_fp8_e5m2 v) { return decode(v); }
  static __nv_fp8_e5m2 fromAcc(float v) {
    return fromBits<__nv_fp8_e5m2>(encodeSmallFloat<5, 2, true, 0x7b, 0x7b, 0x7f>(v));
  }
};

// Rank by rank over a tile of accumulators (rank order is kept per element),
// so the inner loops are simple enough for the compiler to vectorize.
template <typename T, typename Op>
void reduceTyped(const void* const* inputs, int nranks, void* out, size_t count) {
  using Tr = Traits<T>;
  using Acc = typename Tr::Acc;
  constexpr size_t kTile = 256;
  Acc acc[kTile];
  T* dst = static_cast<T*>(out);
  for (size_t base = 0; base < count; base += kTile) {
    const size_t n = count - base < kTile ? count - base : kTile;
    const T* first = static_cast<const T*>(inputs[0]) + base;
    for (size_t i = 0; i < n; ++i) acc[i] = Tr::toAcc(first[i]);
    for (int r = 1; r < nranks; ++r) {
      const T* in = static_cast<const T*>(inputs[r]) + base;
      for (size_t i = 0; i < n; ++i) acc[i] = Op::combine(acc[i], Tr::toAcc(in[i]));
    }
    if constexpr (std::is_same<Op, OpAvg>::value)
      for (size_t i = 0; i < n; ++i) acc[i] = Op::finish(acc[i], nranks);
    for (size_t i = 0; i < n; ++i) dst[base + i] = Tr::fromAcc(acc[i]);
  }
}

template <typename T>
void reduceOp(const void* const* inputs, int nranks, void* out, size_t count, rcnRedOp_t op) {
  switch (op) {
    case rcnSum: return reduceTyped<T, OpSum>(inputs, nranks, out, count);
    case rcnProd: return reduceTyped<T, OpProd>(inputs, nranks, out, count);
    case rcnMax: return reduceTyped<T, OpMax>(inputs, nranks, out, count);
    case rcnMin: return reduceTyped<T, OpMin>(inputs, nranks, out, count);
    case rcnAvg: return reduceTyped<T, OpAvg>(inputs, nranks, out, count);
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
