// SPDX-License-Identifier: BSD-3-Clause
// The launcher's variables (torchrun, OpenMPI, PMI, Slurm):
// the input is NAME=VALUE lines. A launch that parses must be coherent.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "core/launch_env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = setenv("ROCENANTE_DEBUG", "NONE", 1) == 0;
  (void)quiet;
  std::map<std::string, std::string> vars;
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
    begin = end + 1;
  }
  const rcn::EnvLookup env = [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  rcn::LauncherInfo launch;
  std::string why;
  if (!rcn::parseLauncherEnv(env, &launch, &why)) {
    if (why.empty()) abort();  // a refusal says why
    return 0;
  }
  if (launch.nranks < 1 || launch.rank < 0 || launch.rank >= launch.nranks) abort();
  (void)rcn::partialLauncherVars(env);
  return 0;
}
