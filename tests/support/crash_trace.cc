// SPDX-License-Identifier: BSD-3-Clause
#include "support/crash_trace.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace rcn::test {
namespace {

char gLabel[64] = "rank ?";

void writeText(const char* text) {
  ssize_t w = write(STDERR_FILENO, text, strlen(text));
  (void)w;
}

const char* signalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    default: return "SIGILL";
  }
}

// Async-signal-safe apart from backtrace(), whose one-time setup is done at install.
void onCrash(int sig, siginfo_t* info, void*) {
  char line[192];
  snprintf(line, sizeof line, "\n%s: CRASH signal %d (%s) at address %p, thread %ld; backtrace:\n",
           gLabel, sig, signalName(sig), info ? info->si_addr : nullptr, (long)syscall(SYS_gettid));
  writeText(line);
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  writeText("CRASH end of backtrace\n");
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void installCrashTrace(const char* label) {
  snprintf(gLabel, sizeof gLabel, "%s", label);
  void* warm[2];
  backtrace(warm, 2);  // loads libgcc_s now, not inside the handler
  static char altStack[1 << 16];
  stack_t ss{};
  ss.ss_sp = altStack;
  ss.ss_size = sizeof altStack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = onCrash;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
}

const char* crashTraceLabel() { return gLabel; }

}  // namespace rcn::test
