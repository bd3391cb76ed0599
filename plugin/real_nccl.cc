// SPDX-License-Identifier: BSD-3-Clause
// Resolves every entry point of the real NCCL once, from the library that
// core/nccl_lib.cc opened (never from the global namespace, which holds our
// own forwarders when we are preloaded).
#include "plugin/real_nccl.h"

#include <dlfcn.h>

#include <mutex>
#include <set>
#include <string>

#include "core/log.h"
#include "core/nccl_lib.h"

namespace rcn::shim {

const RealNccl& realNccl() {
  static const RealNccl real = [] {
    RealNccl r{};
    // Opens the library (nccl_lib.cc logs what it tried, or what it lacks).
    // Each entry point on its own: one that an older NCCL lacks fails only
    // its own calls (reportMissing), not every forwarder.
    void* handle = ncclLibraryHandle();
    if (!handle) return r;
#define X(name) r.name = reinterpret_cast<decltype(r.name)>(dlsym(handle, #name));
#include "plugin/real_nccl.def"
#undef X
    return r;
  }();
  return real;
}

void reportMissing(const char* name) {
  static std::mutex mutex;
  static std::set<std::string> reported;
  std::lock_guard<std::mutex> lock(mutex);
  if (!reported.insert(name).second) return;
  if (!ncclLibraryHandle()) {
    RCN_WARN(RCN_LOG_SHIM, "%s: no real NCCL library to forward to (the warnings when it was looked for say why)", name);
  } else {
    RCN_WARN(RCN_LOG_SHIM, "%s: the real NCCL (%s) does not have this entry point (older "
             "version?); the call does nothing and returns its failure value (ncclInvalidUsage "
             "where it returns a result)", name, ncclLibraryPath());
  }
}

}  // namespace rcn::shim
