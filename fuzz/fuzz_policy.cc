// SPDX-License-Identifier: BSD-3-Clause
// ROCENANTE_POLICY: the routing policy YAML. Any text either parses or is
// refused with an error naming the file; nothing else may happen.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/log.h"
#include "core/policy_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = setenv("ROCENANTE_DEBUG", "NONE", 1) == 0;
  (void)quiet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  rcn::PolicyFile policy;
  std::string error;
  const rcnResult_t result = rcn::policyFileParse(text, "fuzz.yaml", &policy, &error);
  if (result != rcnSuccess && error.find("fuzz.yaml") == std::string::npos) abort();  // an error must name the file
  return 0;
}
