// SPDX-License-Identifier: BSD-3-Clause
#include "support/multiproc.h"

#include "support/crash_trace.h"
#include "support/timeout_scale.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace rcn::test {
namespace {

// True when every thread of this process but the caller sleeps or is stopped
// (state S, D, T or t in /proc/self/task/TID/stat), as the bootstrap root is
// while it waits in poll.
bool otherThreadsAsleep() {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return true;  // no /proc: nothing to wait for
  const std::string self = std::to_string(gettid());
  bool asleep = true;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.' || self == entry->d_name) continue;
    const std::string path = std::string("/proc/self/task/") + entry->d_name + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;  // the thread just exited
    char line[512] = "";
    const bool read = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    // "tid (name) S ...": the state follows the last ')', the name may hold any byte.
    const char* close = read ? std::strrchr(line, ')') : nullptr;
    if (close && close[1] == ' ' && !std::strchr("SDTt", close[2])) asleep = false;
  }
  closedir(tasks);
  return asleep;
}

// The allocators of clang's ThreadSanitizer (14 and 16) and AddressSanitizer
// (14) runtimes keep their locks as they are at fork: a child forked while
// another thread of the parent allocates (the bootstrap root answering a rank
// that started earlier, a thread being born or dying) inherits a held lock and
// hangs at its first malloc. So the ranks are forked while every other thread
// sleeps, and start together only after the last fork (a rank that started
// earlier would wake the root). Bounded: after 5 s it forks anyway.
void waitForQuietThreads() {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!otherThreadsAsleep()) {
    if (std::chrono::steady_clock::now() > end) {
      std::fprintf(stderr, "runRanks: a thread of the test still runs after 5 s; forking anyway\n");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Blocks until the parent closes the gate's write end (EOF) or dies.
void waitAtGate(int readFd) {
  char byte;
  while (read(readFd, &byte, 1) < 0 && errno == EINTR) {}
  close(readFd);
}

}  // namespace

std::vector<RankOutcome> runRanks(int nranks, const std::function<int(int)>& body, double timeoutSec) {
  std::fflush(nullptr);  // or buffered output would print once per child
  std::vector<pid_t> pids(nranks, -1);
  std::vector<RankOutcome> outcomes(nranks);
  int gate[2];
  if (pipe2(gate, O_CLOEXEC) != 0) {
    std::perror("runRanks: pipe2");
    return outcomes;  // every rank reads as not run (exit -1)
  }
  waitForQuietThreads();
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(gate[1]);
      waitAtGate(gate[0]);
      char label[32];
      std::snprintf(label, sizeof label, "rank %d", r);
      installCrashTrace(label);
      int code = body(r);
      std::fflush(nullptr);
      _exit(code);
    }
    pids[r] = pid;
  }
  close(gate[0]);
  close(gate[1]);  // every rank starts
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
