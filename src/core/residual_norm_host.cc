// SPDX-License-Identifier: BSD-3-Clause
#include "core/residual_norm_host.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <vector>

#include "kernels/norm_math.h"

namespace rcn {

namespace {

// A row's sum of squares in the kernel's order: per thread, then each warp
// by halving, then the warps in order.
template <typename T>
float rowSumSquares(const T* row, size_t hidden) {
  const int threads = normThreads(hidden);
  std::vector<float> lane(threads, 0.0f);
  for (size_t e = 0; e < hidden; ++e) {
    const size_t thread = (e / kNormUnitElems) % threads;
    lane[thread] = addSquare(lane[thread], ElemTraits<T>::toAcc(row[e]));
  }
  float total = 0.0f;
  for (int warp = 0; warp < threads / kNormWarp; ++warp) {
    float* v = &lane[warp * kNormWarp];
    for (int offset = kNormWarp / 2; offset > 0; offset /= 2) {
      float halved[kNormWarp];
      for (int i = 0; i < kNormWarp; ++i) halved[i] = v[i] + v[i ^ offset];
      std::copy(halved, halved + kNormWarp, v);
    }
    total = warp == 0 ? v[0] : total + v[0];
  }
  return total;
}

template <typename T, typename Out>
void normRows(const ResidualNormCall& c, const T* sum) {
  T* residual = static_cast<T*>(c.residual);
  const T* weight = static_cast<const T*>(c.weight);
  Out* out = static_cast<Out*>(c.normOut);
  for (size_t row = 0; row < c.tokens; ++row) {
    const size_t base = row * c.hidden;
    for (size_t e = 0; e < c.hidden; ++e) residual[base + e] = addResidual(sum[base + e], residual[base + e]);
    const float inv = inverseRms(rowSumSquares(residual + base, c.hidden), c.hidden, c.eps);
    for (size_t e = 0; e < c.hidden; ++e)
      out[base + e] =
          normOutput<Out>(ElemTraits<T>::toAcc(residual[base + e]), inv, ElemTraits<T>::toAcc(weight[e]), c.normScale);
  }
}

template <typename T>
void normRowsOf(const ResidualNormCall& c, const void* sum) {
  if (c.normType == rcnFloat8e4m3) normRows<T, __nv_fp8_e4m3>(c, static_cast<const T*>(sum));
  else normRows<T, T>(c, static_cast<const T*>(sum));
}

}  // namespace

void hostResidualNorm(const ResidualNormCall& call, const void* sum) {
  if (call.dtype == rcnBfloat16) normRowsOf<__nv_bfloat16>(call, sum);
  else normRowsOf<__half>(call, sum);
}

}  // namespace rcn
