// SPDX-License-Identifier: BSD-3-Clause
#include "core/residual_norm.h"

#include <vector>

#include "core/check.h"
#include "core/device_memory.h"
#include "core/device_scope.h"
#include "core/dtype.h"
#include "core/residual_norm_host.h"

namespace rcn {

namespace {

size_t sumBytes(const ResidualNormCall& call) { return call.count() * dtypeSize(call.dtype); }

// The summed rows go straight into normOut where it has the dtype's size;
// an e4m3 normOut is too small, so they go to scratch memory then.
bool needsScratch(const ResidualNormCall& call) { return call.normType != call.dtype; }

rcnResult_t composeOnGpu(rcnComm* comm, const ResidualNormCall& call, cudaStream_t stream) {
  DeviceScope guard(comm->cudaDev);  // the scratch pool and the kernel are this device's
  RCN_ARG_CHECK(guard.ok(), "cannot make CUDA device %d current", comm->cudaDev);
  void* sum = call.normOut;
  if (needsScratch(call)) RCN_CHECK(allocScratch(&sum, sumBytes(call), stream));
  rcnResult_t result = commRouteAllReduce(comm, call.send, sum, call.count(), call.dtype, rcnSum, stream);
  if (result == rcnSuccess) result = launchResidualNorm(call, sum, comm->pdl, stream);
  if (needsScratch(call)) freeScratch(sum, stream);
  return result;
}

rcnResult_t composeOnHost(rcnComm* comm, const ResidualNormCall& call) {
  std::vector<uint8_t> scratch(needsScratch(call) ? sumBytes(call) : 0);
  void* sum = needsScratch(call) ? scratch.data() : call.normOut;
  RCN_CHECK(commRouteAllReduce(comm, call.send, sum, call.count(), call.dtype, rcnSum, nullptr));
  hostResidualNorm(call, sum);
  return rcnSuccess;
}

}  // namespace

bool commFusesResidualNorm(const rcnComm* comm, const ResidualNormCall& call, cudaStream_t stream) {
  if (!comm->fast || !comm->fast->fusesResidualNorm(call)) return false;
  // With NCCL behind the fast path, the policy routes the call as it would
  // route its all-reduce alone; without, the fast path takes what it can.
  return !comm->nccl || commTakesFastPath(comm, sumBytes(call), call.dtype, rcnSum, stream);
}

rcnResult_t commAllReduceResidualNorm(rcnComm* comm, const ResidualNormCall& call, cudaStream_t stream) {
  CollectiveCall admitted(comm);
  RCN_CHECK(admitted.enter("rcnAllReduceResidualRmsNorm"));
  if (commFusesResidualNorm(comm, call, stream)) {
    RCN_TRACE_LOG(RCN_LOG_COLL, "allreduce+residual+rmsnorm %zu x %zu %s -> %s fused", call.tokens, call.hidden,
                  dtypeName(call.dtype), comm->fast->transportName());
    return comm->fast->allReduceResidualNorm(call, stream);
  }
  if (comm->cudaDev < 0) return composeOnHost(comm, call);
  return composeOnGpu(comm, call, stream);
}

}  // namespace rcn
