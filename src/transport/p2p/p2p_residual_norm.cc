// SPDX-License-Identifier: BSD-3-Clause
// The p2p path's all-reduce fused with the residual add and RMSNorm: the
// LL lines of the one-shot all-reduce carry the partial rows, and one kernel
// per call sums, adds and normalizes them (kernels/residual_norm.h).
#include "core/check.h"
#include "core/device_scope.h"
#include "kernels/residual_norm.h"
#include "transport/p2p/p2p_path.h"

namespace rcn {

bool P2pPath::fusesResidualNorm(const ResidualNormCall& call) const {
  return call.count() * 2 <= maxBytes_ && fusedNormFits(call, llMaxBytes_);
}

rcnResult_t P2pPath::enqueueResidualNorm(const ResidualNormCall& call, cudaStream_t stream) {
  DeviceScope guard(cudaDev_);
  RCN_ARG_CHECK(guard.ok(), "cannot make CUDA device %d current", cudaDev_);
  return launchFusedNorm(args_, call, launch_.programmaticLaunch, stream);
}

}  // namespace rcn
