// Runs a function as N forked ranks and reports how each ended. Fork happens
// before any CUDA call in the child, so each rank may pick its own GPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

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
