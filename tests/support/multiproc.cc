// SPDX-License-Identifier: BSD-3-Clause
#include "support/multiproc.h"

#include "support/crash_trace.h"
#include "support/timeout_scale.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

namespace rcn::test {

std::vector<RankOutcome> runRanks(int nranks, const std::function<int(int)>& body, double timeoutSec) {
  std::fflush(nullptr);  // or buffered output would print once per child
  std::vector<pid_t> pids(nranks, -1);
  std::vector<RankOutcome> outcomes(nranks);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      char label[32];
      std::snprintf(label, sizeof label, "rank %d", r);
      installCrashTrace(label);
      int code = body(r);
      std::fflush(nullptr);
      _exit(code);
    }
    pids[r] = pid;
  }
  // Sanitizers slow a rank down by 10-100x: ROCENANTE_TEST_TIMEOUT_SCALE stretches the limit.
  timeoutSec = scaledSeconds(timeoutSec);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSec);
  int remaining = nranks;
  while (remaining > 0) {
    for (int r = 0; r < nranks; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      pid_t done = waitpid(pids[r], &status, WNOHANG);
      if (done != pids[r]) continue;
      if (WIFEXITED(status)) outcomes[r].exitCode = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) outcomes[r].signal = WTERMSIG(status);
      pids[r] = -1;
      --remaining;
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        outcomes[r].timedOut = true;
        pids[r] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return outcomes;
}

bool allSucceeded(const std::vector<RankOutcome>& outcomes, std::string* report) {
  bool ok = true;
  std::string text;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    const RankOutcome& o = outcomes[r];
    char line[128];
    std::snprintf(line, sizeof line, "rank %zu: exit %d signal %d%s\n", r, o.exitCode, o.signal,
                  o.timedOut ? " (timed out, killed)" : "");
    text += line;
    if (o.exitCode != 0 || o.signal != 0 || o.timedOut) ok = false;
  }
  if (report) *report = text;
  return ok;
}

}  // namespace rcn::test
