// Placeholder until the proxy path lands.
#include "transport/transport.h"

namespace rcn {

rcnResult_t createProxyPath(const FastPathContext& ctx, std::unique_ptr<FastPath>* out,
                            std::string* why) {
  out->reset();
  *why = "proxy path: not built yet";
  return rcnSuccess;
}

}  // namespace rcn
