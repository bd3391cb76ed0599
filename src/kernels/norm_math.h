// SPDX-License-Identifier: BSD-3-Clause
// The arithmetic of the residual add + RMSNorm that follows a sum all-reduce
// (rcnAllReduceResidualRmsNorm), written once for the GPU kernels
// (residual_norm.cu, fused_norm.cu) and the CPU (residual_norm_host.cc), so
// that every path and every rank gives the same bits:
//   sum      = T(sum over ranks in rank order of float(partial))  (rcnAllReduce's bits)
//   residual = T(float(residual) + float(sum))
//   inv      = 1 / sqrtf(sumSquares(residual row) / hidden + eps)   (IEEE, not rsqrtf)
//   normOut  = T(float(residual) * inv * float(weight)), or e4m3 of that / *scale
// The row's sum of squares has a fixed order: a row is one block of
// normThreads(hidden) threads; thread t adds, with fmaf, the squares of the
// elements of units t, t + threads, ... (a unit: 4 consecutive elements, in
// order); each warp then sums its lanes by halving (lane i adds lane i ^ 16,
// then ^ 8, ^ 4, ^ 2, ^ 1), and the warps' sums are added in warp order.
#pragma once

#include <cmath>
#include <cstddef>

#include "kernels/reduce_ops.cuh"

namespace rcn {

constexpr int kNormUnitElems = 4;  // one 8-byte LL unit of a 16-bit type
constexpr int kNormWarp = 32;
constexpr int kNormMaxThreads = 1024;
constexpr int kNormMaxWarps = kNormMaxThreads / kNormWarp;

// Threads of the block that normalizes one row: one unit each where the row
// allows, in whole warps, at most 1024. A function of hidden alone, so the
// fused and the separate kernel (and the CPU) reduce in the same order.
RCN_HOST_DEVICE constexpr int normThreads(size_t hidden) {
  const size_t units = (hidden + kNormUnitElems - 1) / kNormUnitElems;
  const size_t warps = (units + kNormWarp - 1) / kNormWarp;
  return warps == 0 ? kNormWarp : warps >= kNormMaxWarps ? kNormMaxThreads : static_cast<int>(warps) * kNormWarp;
}

// The new residual: the summed partials added to the old one, rounded once.
template <typename T>
RCN_HOST_DEVICE inline T addResidual(T sum, T residual) {
  return ElemTraits<T>::fromAcc(ElemTraits<T>::toAcc(residual) + ElemTraits<T>::toAcc(sum));
}

// One element's square into a thread's running sum (fused multiply-add, so
// host and device round alike).
RCN_HOST_DEVICE inline float addSquare(float sum, float x) { return fmaf(x, x, sum); }

// 1 / RMS of a row from its sum of squares. Division and square root are
// IEEE on both sides (the library is built without fast math).
RCN_HOST_DEVICE inline float inverseRms(float sumSquares, size_t hidden, float eps) {
  const float meanSquare = sumSquares / static_cast<float>(hidden);
  return 1.0f / sqrtf(meanSquare + eps);
}

// A normalized element in the output type: Out is T, or e4m3 scaled by 1 / *scale.
template <typename Out>
RCN_HOST_DEVICE inline Out normOutput(float x, float inv, float weight, const float* scale) {
  const float normed = x * inv;
  const float value = normed * weight;
  if constexpr (std::is_same<Out, __nv_fp8_e4m3>::value) return ElemTraits<Out>::fromAcc(value / *scale);
  else return ElemTraits<Out>::fromAcc(value);
}

}  // namespace rcn
