// SPDX-License-Identifier: BSD-3-Clause
// Running the rcn_engine binary from a test (its path: RCN_ENGINE_BIN, which
// tests/engine.cmake and engine_hf.cmake define): its exit status, and its
// stdout and stderr kept apart.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "support/temp_file.h"

namespace rcn::test {

struct EngineRun {
  int status = -1;  // exit code; -1 when a signal ended it
  std::string out, err;
};

// Runs `binary args` through the shell, its stderr through a temporary file.
inline EngineRun runEngine(const std::string& binary, const std::string& args) {
  const TempFile err("", "rcn_engine_stderr");
  FILE* pipe = popen((binary + " " + args + " 2>" + err.path()).c_str(), "r");
  REQUIRE(pipe);
  EngineRun run;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) run.out.append(buffer, n);
  const int raw = pclose(pipe);
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream in(err.path());
  run.err.assign(std::istreambuf_iterator<char>(in), {});
  return run;
}

#ifdef RCN_ENGINE_BIN
// The same for the rcn_engine this test was built with.
inline EngineRun runEngine(const std::string& args) { return runEngine(RCN_ENGINE_BIN, args); }
#endif

}  // namespace rcn::test
