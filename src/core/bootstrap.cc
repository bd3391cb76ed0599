// What every kind of bootstrap shares: a barrier is an all-gather of one byte.
#include "core/bootstrap.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "core/params.h"

namespace rcn {

// 1 ms up to 11.6 days; a value outside (0 or negative timed out at once)
// is warned about once and the default stands in.
int64_t bootstrapTimeoutMs() {
  constexpr int64_t kMaxMs = 1000000000;
  const int64_t ms = paramInt(ParamId::BootstrapTimeoutMs);
  if (ms >= 1 && ms <= kMaxMs) return ms;
  int64_t fallback = 0;
  std::string why;
  parseIntText(paramTable()[static_cast<size_t>(ParamId::BootstrapTimeoutMs)].defaultText, &fallback, &why);
  static std::once_flag warned;
  std::call_once(warned, [&] {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "ROCENANTE_BOOTSTRAP_TIMEOUT_MS=%lld is outside 1..%lld; using the default %lld",
             static_cast<long long>(ms), static_cast<long long>(kMaxMs), static_cast<long long>(fallback));
  });
  return fallback;
}

rcnResult_t Bootstrap::barrier() {
  std::vector<char> tokens(static_cast<size_t>(nranks()), 0);
  RCN_CHECK(allGather(tokens.data(), 1));
  return rcnSuccess;
}

}  // namespace rcn
