// SPDX-License-Identifier: BSD-3-Clause
// ROCENANTE_TEST_TIMEOUT_SCALE (1 to 1000, default 1): runs under
// compute-sanitizer or a debugger are 10-100x slower, so every fixed wait a
// test sets (a peer wait, a bound on how long something may take, a forked
// rank's time limit) is multiplied by it. A test that expects a wait to run
// out scales both the wait and the bounds it checks.
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"

namespace rcn::test {

inline int64_t timeoutScale() { return paramInt(ParamId::TestTimeoutScale); }
inline int64_t scaledMs(int64_t ms) { return ms * timeoutScale(); }
inline double scaledSeconds(double seconds) { return seconds * double(timeoutScale()); }
// For setenv("ROCENANTE_TIMEOUT_MS", ...).
inline std::string scaledMsText(int64_t ms) { return std::to_string(scaledMs(ms)); }

}  // namespace rcn::test
