// SPDX-License-Identifier: BSD-3-Clause
// rcn API results as the engine's exceptions.
#pragma once

#include <string>

#include "model.h"
#include "rocenante/rocenante.h"

namespace engine {

// The message carries the library's own reason (rcnGetLastError, this
// thread's), which the log may have sent elsewhere or not printed at all.
inline void rcnCheck(rcnResult_t r, const char* what) {
  if (r == rcnSuccess) return;
  const std::string reason = rcnGetLastError(nullptr);
  throw EngineError(std::string(what) + ": " + (reason.empty() ? rcnGetErrorString(r) : reason));
}

}  // namespace engine
