// SPDX-License-Identifier: BSD-3-Clause
// The files a user points rocenante and its tools at (ROCENANTE_POLICY,
// ROCENANTE_TOPO_FILE to read; ROCENANTE_DEBUG_FILE, ROCENANTE_TOPO_DUMP_FILE,
// the sweep's results to write), opened so that none can hang or fill memory.
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdio>
#include <string>

namespace rcn {

// Far above any real policy or topology file (a few KB), far below memory.
constexpr size_t kMaxConfigFileBytes = size_t(64) << 20;

// Reads the regular file at path into text. A directory, a FIFO, a device
// such as /dev/zero or a file over maxBytes is refused with why naming it,
// so that none can hang or fill memory; so is one that cannot be opened
// (why: the system's reason).
bool readConfigFile(const std::string& path, std::string* text, std::string* why,
                    size_t maxBytes = kMaxConfigFileBytes);

// Opens path for writing (appending, or truncated first), created if need
// be; null with why (the system's reason) when it cannot be. A FIFO with no
// reader is refused at once instead of blocking the caller until one comes.
FILE* openOutputFile(const std::string& path, bool append, std::string* why);

// Writes text to path whole (openOutputFile, truncating); false with why
// (the path and the system's reason) when it cannot.
bool writeOutputFile(const std::string& path, const std::string& text, std::string* why);

// While alive, a write by this thread to a pipe or FIFO whose reader has
// gone fails with EPIPE instead of raising SIGPIPE, whose default action
// would kill the program rocenante lives in. The signal such a write leaves
// pending is taken back at the end, unless one was pending before; the
// thread's signal mask is restored. (POSIX shows no thread's own pending
// set: a SIGPIPE sent to the whole process in that window is taken too.)
class SigpipeBlocked {
 public:
  SigpipeBlocked();
  ~SigpipeBlocked();
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t oldMask_;
  bool wasPending_;
};

}  // namespace rcn
