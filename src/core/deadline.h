// SPDX-License-Identifier: BSD-3-Clause
// Deadlines for waits. Every wait for a peer or a device is bounded: a peer
// that died or a kernel that never finishes must turn into an error the caller
// can report, never into a hang. These helpers keep that bound in one place.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

namespace rcn {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadlineAfterMs(int64_t ms) { return Clock::now() + std::chrono::milliseconds(ms); }

// Milliseconds left until the deadline (0 once it has passed).
inline int64_t msUntil(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? left : 0;
}

inline bool expired(Deadline deadline) { return Clock::now() > deadline; }

// True once done() holds, false once the deadline has passed; `pause` between
// tries keeps a long wait off the CPU (zero: poll flat out). done() is asked
// before the deadline is looked at: waits that share one deadline (abort's)
// still look once when an earlier wait used up the time, and a condition that
// holds wins over a deadline that just passed. done() may note why it ended
// (an error, an abort) in what it captures.
template <typename Done>
bool pollUntil(Deadline deadline, std::chrono::microseconds pause, Done done) {
  while (!done()) {
    if (expired(deadline)) return false;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  return true;
}

// Retries that back off: sleeps *delay (no later than the deadline), then
// doubles it up to `cap`.
inline void backOff(Deadline deadline, std::chrono::milliseconds* delay, std::chrono::milliseconds cap) {
  std::this_thread::sleep_for(std::min(*delay, std::chrono::milliseconds(msUntil(deadline))));
  *delay = std::min(*delay * 2, cap);
}

}  // namespace rcn
