// SPDX-License-Identifier: BSD-3-Clause
// rcnAllReduceResidualRmsNorm inside the communicator: the fused kernel
// where the fast path has one for the call, else the all-reduce as
// rcnAllReduce routes it (fast path or NCCL) and then the separate norm
// kernel, or, on the host backend, the norm on the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include "core/comm.h"
#include "kernels/residual_norm.h"

namespace rcn {

// Arguments checked by the API (api_residual_norm.cc).
rcnResult_t commAllReduceResidualNorm(rcnComm* comm, const ResidualNormCall& call, cudaStream_t stream);

// Whether the call runs as one kernel (rather than an all-reduce and a norm
// kernel): the same on every rank for the same call.
bool commFusesResidualNorm(const rcnComm* comm, const ResidualNormCall& call, cudaStream_t stream);

}  // namespace rcn
