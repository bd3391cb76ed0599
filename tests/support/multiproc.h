// SPDX-License-Identifier: BSD-3-Clause
// Runs a function as N forked ranks and reports how each ended. Fork happens
// before any CUDA call in the child, so each rank may pick its own GPU.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "support/crash_trace.h"

// In a rank's body (an int function run by runRanks): when cond is false,
// prints "<rank label>: file:line: " and the message, and returns 1.
#define RANK_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s: %s:%d: ", ::rcn::test::crashTraceLabel(), __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                               \
      std::fprintf(stderr, "\n");                                                      \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

#define RANK_EXPECT(cond) RANK_CHECK(cond, "expected %s", #cond)

namespace rcn::test {

struct RankOutcome {
  int exitCode = -1;   // the child's exit status, or -1 if killed
  int signal = 0;      // the signal that ended it, if any
  bool timedOut = false;
};

// Forks nranks children; child r runs body(r) and exits with its return value.
// Children still running after timeoutSec are killed (SIGKILL) and marked.
std::vector<RankOutcome> runRanks(int nranks, const std::function<int(int rank)>& body,
                                  double timeoutSec = 120.0);

// True when every rank exited 0.
bool allSucceeded(const std::vector<RankOutcome>& outcomes, std::string* report = nullptr);

}  // namespace rcn::test
