// SPDX-License-Identifier: BSD-3-Clause
// Element types and reduction ops for the device kernels. Each storage type
// has an accumulation type: 16- and 8-bit floats accumulate in fp32, integers
// in a type at least as wide as themselves with wrap-around (never undefined
// overflow), fp32/fp64 in themselves. The host backend's reduction
// (transport/host/host_reduce.cc) uses the same ops and integer/fp32/fp64
// traits, so everything here is host-callable too; it has its own faster
// conversions for the 16- and 8-bit floats.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

// __host__ __device__ under nvcc; nothing for the host compiler, which
// would warn about the attributes.
#ifdef __CUDACC__
#define RCN_HOST_DEVICE __host__ __device__
#else
#define RCN_HOST_DEVICE
#endif

namespace rcn {

template <typename T>
struct ElemTraits;

// Integers: accumulate in Acc, which wraps like the unsigned type of the same width.
template <typename T, typename AccT>
struct IntTraits {
  using Acc = AccT;
  static constexpr bool kIsInt = true;
  RCN_HOST_DEVICE static Acc toAcc(T v) { return static_cast<Acc>(v); }
  RCN_HOST_DEVICE static T fromAcc(Acc v) { return static_cast<T>(v); }
};

template <> struct ElemTraits<int8_t> : IntTraits<int8_t, int32_t> {};
template <> struct ElemTraits<uint8_t> : IntTraits<uint8_t, uint32_t> {};
template <> struct ElemTraits<int32_t> : IntTraits<int32_t, int32_t> {};
template <> struct ElemTraits<uint32_t> : IntTraits<uint32_t, uint32_t> {};
template <> struct ElemTraits<int64_t> : IntTraits<int64_t, int64_t> {};
template <> struct ElemTraits<uint64_t> : IntTraits<uint64_t, uint64_t> {};

template <typename T>
struct WideFloatTraits {
  using Acc = T;
  static constexpr bool kIsInt = false;
  RCN_HOST_DEVICE static Acc toAcc(T v) { return v; }
  RCN_HOST_DEVICE static T fromAcc(Acc v) { return v; }
};
template <> struct ElemTraits<float> : WideFloatTraits<float> {};
template <> struct ElemTraits<double> : WideFloatTraits<double> {};

template <> struct ElemTraits<__half> {
  using Acc = float;
  static constexpr bool kIsInt = false;
  RCN_HOST_DEVICE static float toAcc(__half v) { return __half2float(v); }
  RCN_HOST_DEVICE static __half fromAcc(float v) { return __float2half_rn(v); }
};
template <> struct ElemTraits<__nv_bfloat16> {
  using Acc = float;
  static constexpr bool kIsInt = false;
  RCN_HOST_DEVICE static float toAcc(__nv_bfloat16 v) { return __bfloat162float(v); }
  RCN_HOST_DEVICE static __nv_bfloat16 fromAcc(float v) { return __float2bfloat16_rn(v); }
};
// fp8 conversions round to nearest even and saturate to the largest finite value.
template <> struct ElemTraits<__nv_fp8_e4m3> {
  using Acc = float;
  static constexpr bool kIsInt = false;
  RCN_HOST_DEVICE static float toAcc(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
  RCN_HOST_DEVICE static __nv_fp8_e4m3 fromAcc(float v) { return __nv_fp8_e4m3(v); }
};
template <> struct ElemTraits<__nv_fp8_e5m2> {
  using Acc = float;
  static constexpr bool kIsInt = false;
  RCN_HOST_DEVICE static float toAcc(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
  RCN_HOST_DEVICE static __nv_fp8_e5m2 fromAcc(float v) { return __nv_fp8_e5m2(v); }
};

// Integer + and * through the unsigned type, so overflow wraps instead of being undefined.
template <typename A>
RCN_HOST_DEVICE inline A wrapAdd(A a, A b) {
  if constexpr (std::is_integral<A>::value) {
    using U = typename std::make_unsigned<A>::type;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename A>
RCN_HOST_DEVICE inline A wrapMul(A a, A b) {
  if constexpr (std::is_integral<A>::value) {
    using U = typename std::make_unsigned<A>::type;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// Ops combine accumulators; finish() runs once on the total (avg divides by N).
struct OpSum {
  template <typename A> RCN_HOST_DEVICE static A combine(A a, A b) { return wrapAdd(a, b); }
  template <typename A> RCN_HOST_DEVICE static A finish(A a, int) { return a; }
};
struct OpProd {
  template <typename A> RCN_HOST_DEVICE static A combine(A a, A b) { return wrapMul(a, b); }
  template <typename A> RCN_HOST_DEVICE static A finish(A a, int) { return a; }
};
// fmax/fmin would drop NaNs; a comparison keeps the first operand's NaN like NCCL does.
struct OpMax {
  template <typename A> RCN_HOST_DEVICE static A combine(A a, A b) { return b > a ? b : a; }
  template <typename A> RCN_HOST_DEVICE static A finish(A a, int) { return a; }
};
struct OpMin {
  template <typename A> RCN_HOST_DEVICE static A combine(A a, A b) { return b < a ? b : a; }
  template <typename A> RCN_HOST_DEVICE static A finish(A a, int) { return a; }
};
// Sum, then divide by the rank count (integer division for integers).
struct OpAvg {
  template <typename A> RCN_HOST_DEVICE static A combine(A a, A b) { return wrapAdd(a, b); }
  template <typename A> RCN_HOST_DEVICE static A finish(A a, int n) { return a / static_cast<A>(n); }
};

}  // namespace rcn
