// rcn API results as the engine's exceptions.
#pragma once

#include <string>

#include "model.h"
#include "rocenante/rocenante.h"

namespace engine {

inline void rcnCheck(rcnResult_t r, const char* what) {
  if (r != rcnSuccess) throw EngineError(std::string(what) + ": " + rcnGetErrorString(r));
}

}  // namespace engine
