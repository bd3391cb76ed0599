// SPDX-License-Identifier: BSD-3-Clause
#include "errors.h"

#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace rcnpy {

void check(rcnResult_t result, const char* call) {
  if (result == rcnSuccess) return;
  // rcnGetLastError is this thread's: the call above ran on it.
  const char* reason = rcnGetLastError(nullptr);
  std::string text = std::string(call) + ": " + rcnGetErrorString(result);
  if (reason && *reason) text += ": " + std::string(reason);
  throw RcnError(result, text);
}

void registerErrorTranslator() {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const RcnError& e) {
      // The exception classes live in Python, where users catch them.
      nb::object exc = nb::module_::import_("rocenante._errors").attr("error_for")(int(e.code), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

}  // namespace rcnpy
