// SPDX-License-Identifier: BSD-3-Clause
// What every kind of bootstrap shares: a barrier is an all-gather of one byte.
#include "core/bootstrap.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "core/params.h"

namespace rcn {

// Up to 10^9 ms (11.6 days, so deadlines stay within 64 bits); 0 or below
// (which timed out at once) is warned about once and the default stands in.
int64_t bootstrapTimeoutMs() {
  const int64_t ms = paramInt(ParamId::BootstrapTimeoutMs);
  if (ms >= 1) return std::min<int64_t>(ms, 1000000000);
  const int64_t fallback = paramDefaultInt(ParamId::BootstrapTimeoutMs);
  if (firstTimeInProcess("bootstrap timeout not positive"))
    RCN_WARN(RCN_LOG_BOOTSTRAP, "ROCENANTE_BOOTSTRAP_TIMEOUT_MS=%lld is not positive; using the default %lld",
             static_cast<long long>(ms), static_cast<long long>(fallback));
  return fallback;
}

rcnResult_t Bootstrap::barrier() {
  std::vector<char> tokens(static_cast<size_t>(nranks()), 0);
  RCN_CHECK(allGather(tokens.data(), 1));
  return rcnSuccess;
}

}  // namespace rcn
