// SPDX-License-Identifier: BSD-3-Clause
// The residual add + RMSNorm after a sum all-reduce, as the host sees it:
// one call's arguments, the separate norm kernel (run after an all-reduce by
// rcnAllReduce or NCCL) and the p2p kernel that does both in one launch.
// kernels/norm_math.h defines the arithmetic both share.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/one_shot.h"
#include "rocenante/rocenante.h"

namespace rcn {

// One rcnAllReduceResidualRmsNorm call (arguments checked by the API).
struct ResidualNormCall {
  const void* send = nullptr;    // this rank's partial rows [tokens][hidden], dtype
  void* residual = nullptr;      // [tokens][hidden], dtype: read, then the new residual written
  const void* weight = nullptr;  // [hidden], dtype
  void* normOut = nullptr;       // [tokens][hidden], normType
  size_t tokens = 0;
  size_t hidden = 0;
  rcnDataType_t dtype = rcnBfloat16;     // rcnBfloat16 or rcnFloat16
  rcnDataType_t normType = rcnBfloat16;  // dtype or rcnFloat8e4m3
  const float* normScale = nullptr;      // device float, with rcnFloat8e4m3
  float eps = 0;

  size_t count() const { return tokens * hidden; }
};

// The call of the public API's arguments, in its order.
inline ResidualNormCall residualNormCall(const void* send, void* residual, const void* weight, void* normOut,
                                         size_t tokens, size_t hidden, rcnDataType_t dtype, rcnDataType_t normType,
                                         const float* normScale, float eps) {
  ResidualNormCall call;
  call.send = send;
  call.residual = residual;
  call.weight = weight;
  call.normOut = normOut;
  call.tokens = tokens;
  call.hidden = hidden;
  call.dtype = dtype;
  call.normType = normType;
  call.normScale = normScale;
  call.eps = eps;
  return call;
}

// The separate norm kernel: `sum` holds the rows already summed over the
// ranks (dtype); it may be call.normOut itself (each element is read before
// it is written). call.send is not read.
rcnResult_t launchResidualNorm(const ResidualNormCall& call, const void* sum, bool programmaticLaunch,
                               cudaStream_t stream);

// Whether the fused p2p kernel takes this call: rows of whole 8-byte LL
// units (hidden % 4 == 0) that fit the lines. Rank-invariant.
bool fusedNormFits(const ResidualNormCall& call, size_t llMaxBytes);

// The fused kernel's call signature (see callSignature): another value than
// any rcnAllReduce's, so a rank in a plain all-reduce sees a mismatch.
uint32_t fusedNormSignature(const ResidualNormCall& call);

// The all-reduce, residual add and RMSNorm in one kernel over the p2p
// exchange: `exchange` carries everything but the call's own fields, which
// this fills (send, count, signature). One block per row (at most
// exchange.maxBlocks blocks, each taking rows block, block + grid, ...).
rcnResult_t launchFusedNorm(const OneShotArgs& exchange, const ResidualNormCall& call, bool programmaticLaunch,
                            cudaStream_t stream);

// Loads both kernels' instances on the current device now (preloadKernels
// in kernel_launch.cuh says why).
rcnResult_t preloadResidualNormKernels();

}  // namespace rcn
