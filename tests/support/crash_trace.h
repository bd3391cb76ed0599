// SPDX-License-Identifier: BSD-3-Clause
// Makes a crashing test process print where it crashed (signal, address,
// thread, backtrace) before it dies. runRanks installs it in every forked
// rank, so a multi-process GPU test that dies of SIGSEGV leaves a trace;
// frames in librocenante.so read "librocenante.so.0(+0x...)", which
// addr2line turns into file:line.
#pragma once

namespace rcn::test {

// Replaces the handlers of SIGSEGV, SIGBUS, SIGABRT, SIGFPE and SIGILL in this
// process; the label starts every line the handler prints.
void installCrashTrace(const char* label);

// The label given to the last installCrashTrace ("rank ?" before any).
const char* crashTraceLabel();

}  // namespace rcn::test
