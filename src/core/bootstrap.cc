// What every kind of bootstrap shares: a barrier is an all-gather of one byte.
#include "core/bootstrap.h"

#include <vector>

#include "core/check.h"

namespace rcn {

rcnResult_t Bootstrap::barrier() {
  std::vector<char> tokens(static_cast<size_t>(nranks()), 0);
  RCN_CHECK(allGather(tokens.data(), 1));
  return rcnSuccess;
}

}  // namespace rcn
