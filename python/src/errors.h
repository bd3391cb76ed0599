// SPDX-License-Identifier: BSD-3-Clause
// rcnResult_t -> Python exception: a failed rcn* call throws RcnError, which
// the module's translator raises as the rocenante.RocenanteError subclass for
// its code (rocenante/_errors.py), with the library's reason.
#pragma once

#include <stdexcept>
#include <string>

#include "rocenante/rocenante.h"

namespace rcnpy {

struct RcnError : std::runtime_error {
  RcnError(rcnResult_t code, const std::string& what) : std::runtime_error(what), code(code) {}
  rcnResult_t code;
};

// Throws RcnError naming `call` and the library's last error unless ok.
void check(rcnResult_t result, const char* call);

// Registers the translator (once, at module load).
void registerErrorTranslator();

}  // namespace rcnpy
