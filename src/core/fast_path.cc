// SPDX-License-Identifier: BSD-3-Clause
#include "core/fast_path.h"

#include "core/check.h"
#include "core/log.h"

namespace rcn {

rcnResult_t FastPath::refuseAfterFailure(const char* what) {
  std::string why;
  const rcnResult_t failed = asyncError(&why);
  if (failed != rcnSuccess)
    RCN_WARN(RCN_LOG_COLL, "%s refused: this communicator's %s path failed before (%s); abort it", what,
             transportName(), why.c_str());
  return failed;
}

rcnResult_t FastPath::allReduce(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                                cudaStream_t stream) {
  const rcnResult_t failed = refuseAfterFailure("all-reduce");
  if (failed != rcnSuccess) return failed;
  return enqueue(send, recv, count, dtype, op, stream);
}

rcnResult_t FastPath::allGather(const void* send, void* recv, size_t sendCount, rcnDataType_t dtype,
                                cudaStream_t stream) {
  const rcnResult_t failed = refuseAfterFailure("all-gather");
  if (failed != rcnSuccess) return failed;
  return enqueueAllGather(send, recv, sendCount, dtype, stream);
}

rcnResult_t FastPath::reduceScatter(const void* send, void* recv, size_t recvCount, rcnDataType_t dtype, rcnRedOp_t op,
                                    cudaStream_t stream) {
  const rcnResult_t failed = refuseAfterFailure("reduce-scatter");
  if (failed != rcnSuccess) return failed;
  return enqueueReduceScatter(send, recv, recvCount, dtype, op, stream);
}

// Reached only through a routing bug: runs() said no.
rcnResult_t FastPath::enqueueAllGather(const void*, void*, size_t, rcnDataType_t, cudaStream_t) {
  RCN_WARN(RCN_LOG_COLL, "internal: the %s path has no all-gather", transportName());
  return rcnInternalError;
}

rcnResult_t FastPath::enqueueReduceScatter(const void*, void*, size_t, rcnDataType_t, rcnRedOp_t, cudaStream_t) {
  RCN_WARN(RCN_LOG_COLL, "internal: the %s path has no reduce-scatter", transportName());
  return rcnInternalError;
}

rcnResult_t FastPath::allReduceResidualNorm(const ResidualNormCall& call, cudaStream_t stream) {
  RCN_CHECK(refuseAfterFailure("all-reduce with residual and RMSNorm"));
  return enqueueResidualNorm(call, stream);
}

rcnResult_t FastPath::enqueueResidualNorm(const ResidualNormCall&, cudaStream_t) {
  RCN_WARN(RCN_LOG_COLL, "the %s path has no fused residual norm kernel", transportName());
  return rcnInternalError;
}

}  // namespace rcn
