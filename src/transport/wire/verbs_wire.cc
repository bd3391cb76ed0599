// Placeholder until the verbs wire lands.
#include "core/check.h"
#include "transport/wire/wire.h"

namespace rcn {

bool verbsDeviceAvailable() { return false; }

rcnResult_t createVerbsWire(const FastPathContext& ctx, const WireLayout& layout,
                            std::unique_ptr<Wire>* out, std::string* why) {
  out->reset();
  *why = "verbs wire: not built";
  return rcnSuccess;
}

}  // namespace rcn
