// SPDX-License-Identifier: BSD-3-Clause
#include "core/user_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace rcn {
namespace {

// Why the open descriptor fd of path is no configuration file to read; "" if it is one.
std::string unusable(int fd, const std::string& path, size_t maxBytes) {
  struct stat st;
  if (fstat(fd, &st) != 0) return errnoText(path.c_str(), errno);
  if (!S_ISREG(st.st_mode)) return path + ": not a regular file";
  if (size_t(st.st_size) > maxBytes)
    return path + ": " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(maxBytes >> 20) +
           " MB such a file may have";
  return "";
}

// Reads fd to its end into contents; "" or why it failed (a file that grows
// past the limit while read fails too).
std::string readAll(int fd, const std::string& path, size_t maxBytes, std::string* contents) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n == 0) return "";
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errnoText(path.c_str(), errno);
    contents->append(buffer, size_t(n));
    if (contents->size() > maxBytes) return path + ": grew past the size limit while being read";
  }
}

}  // namespace

bool readConfigFile(const std::string& path, std::string* text, std::string* why, size_t maxBytes) {
  // Non-blocking, so that opening a FIFO cannot wait; what kind of file it
  // is comes from the descriptor itself, not from a path that could change.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = errnoText(path.c_str(), errno);
    return false;
  }
  std::string contents;
  *why = unusable(fd, path, maxBytes);
  if (why->empty()) *why = readAll(fd, path, maxBytes, &contents);
  close(fd);
  if (!why->empty()) return false;
  *text = std::move(contents);
  return true;
}

FILE* openOutputFile(const std::string& path, bool append, std::string* why) {
  // O_NONBLOCK only for the open itself: it fails with ENXIO on a FIFO no
  // one reads. 0666: the umask decides, as with fopen. O_CLOEXEC: ranks a
  // program starts do not inherit its log file.
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0666);
  if (fd < 0) {
    const int err = errno;
    *why = err == ENXIO ? path + ": a FIFO with no reader" : errnoText(path.c_str(), err);
    return nullptr;
  }
  const int flags = fcntl(fd, F_GETFL);
  FILE* f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, append ? "a" : "w") : nullptr;
  if (!f) {
    *why = errnoText(path.c_str(), errno);
    close(fd);
  }
  return f;
}

bool writeOutputFile(const std::string& path, const std::string& text, std::string* why) {
  FILE* f = openOutputFile(path, false, why);
  if (!f) return false;
  SigpipeBlocked noSigpipe;  // a FIFO's reader may leave before the end
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int writeErrno = errno;
  const bool closed = std::fclose(f) == 0;  // a full disk may show only here
  const int closeErrno = errno;
  if (written && closed) return true;
  *why = errnoText(path.c_str(), written ? closeErrno : writeErrno);
  return false;
}

namespace {

bool sigpipePending() {
  sigset_t pending;
  return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

sigset_t sigpipeOnly() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  return set;
}

}  // namespace

SigpipeBlocked::SigpipeBlocked() {
  const sigset_t pipeOnly = sigpipeOnly();
  pthread_sigmask(SIG_BLOCK, &pipeOnly, &oldMask_);
  wasPending_ = sigpipePending();
}

SigpipeBlocked::~SigpipeBlocked() {
  if (!wasPending_ && sigpipePending()) {
    const sigset_t pipeOnly = sigpipeOnly();
    const timespec now{0, 0};
    // Takes the one our write raised (blocked, so still pending); errno is kept for the caller.
    const int savedErrno = errno;
    while (sigtimedwait(&pipeOnly, nullptr, &now) < 0 && errno == EINTR) {
    }
    errno = savedErrno;
  }
  pthread_sigmask(SIG_SETMASK, &oldMask_, nullptr);
}

}  // namespace rcn
