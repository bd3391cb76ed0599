// What every kind of bootstrap shares: a barrier is an all-gather of one byte.
#include "core/bootstrap.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/params.h"

namespace rcn {

int64_t bootstrapTimeoutMs() {
  return std::clamp<int64_t>(paramInt(ParamId::BootstrapTimeoutMs), 1, 1000000000);
}

rcnResult_t Bootstrap::barrier() {
  std::vector<char> tokens(static_cast<size_t>(nranks()), 0);
  RCN_CHECK(allGather(tokens.data(), 1));
  return rcnSuccess;
}

}  // namespace rcn
