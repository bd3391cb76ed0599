// SPDX-License-Identifier: BSD-3-Clause
#include "mapped_read.h"

#include <setjmp.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>

namespace engine::hf {

namespace {

// The read in progress on this thread, if any.
struct Guard {
  sigjmp_buf resume;
  uintptr_t begin, end;  // whole pages: a fault is reported at the page it hit
};
thread_local Guard* active = nullptr;

struct sigaction previous;  // what handled SIGBUS before this file's handler
std::once_flag installed;

// Whether the kernel raised it for an access (si_code > 0), rather than a
// process sending it (kill, pthread_kill: si_addr then holds no address).
bool isFault(const siginfo_t* info) { return info->si_code > 0; }

// Anything but a read of ours: let the earlier disposition have it, as if
// this handler had never been installed. A handler installed to run once
// (SA_RESETHAND) gives way to the default after it ran, as it would have.
void passOn(int sig, siginfo_t* info, void* context) {
  const struct sigaction earlier = previous;
  if (earlier.sa_flags & SA_RESETHAND) {
    previous = {};
    previous.sa_handler = SIG_DFL;
  }
  if (earlier.sa_flags & SA_SIGINFO) {
    earlier.sa_sigaction(sig, info, context);
    return;
  }
  if (earlier.sa_handler != SIG_DFL && earlier.sa_handler != SIG_IGN) {
    earlier.sa_handler(sig);
    return;
  }
  if (previous.sa_handler == SIG_IGN && !isFault(info)) return;  // a sent SIGBUS the process ignores
  // The default (a fault cannot be ignored): end the process as it would
  // have ended. The signal is blocked in its handler, so the one raised here
  // arrives, under the default, as this handler returns.
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(sig, &fallback, nullptr);
  raise(sig);
}

void onSigbus(int sig, siginfo_t* info, void* context) {
  Guard* guard = active;
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  if (guard && isFault(info) && at >= guard->begin && at < guard->end) siglongjmp(guard->resume, 1);
  passOn(sig, info, context);
}

void install() {
  struct sigaction action = {};
  action.sa_sigaction = onSigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous);
}

}  // namespace

bool readMappedRaw(const void* begin, size_t bytes, void (*body)(void*), void* context) {
  std::call_once(installed, install);
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin);
  Guard guard;
  guard.begin = first / page * page;
  guard.end = (first + bytes + page - 1) / page * page;
  Guard* const outer = active;  // a read inside a read keeps the outer one's guard after it
  if (sigsetjmp(guard.resume, 1) != 0) {
    active = outer;
    return false;
  }
  active = &guard;
  try {
    body(context);
  } catch (...) {  // a guard must not outlive its frame
    active = outer;
    throw;
  }
  active = outer;
  return true;
}

}  // namespace engine::hf
