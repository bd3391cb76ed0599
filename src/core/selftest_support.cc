// SPDX-License-Identifier: BSD-3-Clause
#include "core/selftest_support.h"

#include <vector>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/cuda_poll.h"
#include "core/deadline.h"
#include "core/log.h"
#include "core/params.h"

namespace rcn {

rcnResult_t waitForBatch(TestBuffers& buf) {
  const int64_t limitMs = bootstrapTimeoutMs();
  // Any answer but "not ready" ends the wait: the batch finished, or an error to report.
  const cudaError_t status =
      pollCudaQuery(deadlineAfterMs(limitMs), std::chrono::microseconds(50), [&] { return cudaEventQuery(buf.stop); });
  if (status == cudaErrorNotReady) {
    buf.stuck = true;
    RCN_WARN(RCN_LOG_INIT,
             "self-test: a timed batch did not finish within %lld ms (ROCENANTE_BOOTSTRAP_TIMEOUT_MS); "
             "a rank stopped taking part",
             (long long)limitMs);
    return rcnRemoteError;
  }
  RCN_CUDA_CHECK(status);
  return rcnSuccess;
}

rcnResult_t agreeEveryRankOk(rcnComm* comm, rcnResult_t result) {
  std::vector<uint8_t> flags(comm->nranks, 0);
  flags[comm->rank] = result == rcnSuccess ? 1 : 0;
  RCN_CHECK(comm->bootstrap->allGather(flags.data(), 1));
  if (std::find(flags.begin(), flags.end(), 0) != flags.end()) return result != rcnSuccess ? result : rcnRemoteError;
  return rcnSuccess;
}

rcnResult_t allocateOnEveryRank(rcnComm* comm, TestBuffers& buf, size_t bytes) {
  return agreeEveryRankOk(comm, buf.allocate(bytes));
}

bool selfTestFailsHere(const rcnComm* comm, Collective coll) {
  if (static_cast<int>(paramInt(ParamId::SelfTestFail)) != comm->rank) return false;
  std::string which;
  return paramChoice(ParamId::SelfTestFailCollective, &which) == rcnSuccess && which == collectiveName(coll);
}

}  // namespace rcn
