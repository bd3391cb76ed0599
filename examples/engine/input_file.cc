// SPDX-License-Identifier: BSD-3-Clause
#include "input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "model.h"

namespace engine {

int openRegularFile(const std::string& path, size_t* bytes) {
  // O_NONBLOCK: opening a FIFO that no one writes returns at once; on a
  // regular file it changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;  // read before the text allocates
    throw EngineError(path + ": cannot open (" + std::strerror(err) + ")");
  }
  struct stat st;
  const bool statted = ::fstat(fd, &st) == 0;
  const int err = errno;
  if (statted && S_ISREG(st.st_mode)) {
    *bytes = size_t(st.st_size);
    return fd;
  }
  ::close(fd);
  throw EngineError(path + (statted ? ": not a regular file" : ": cannot stat (" + std::string(std::strerror(err)) + ")"));
}

void requireReadable(const std::string& path, const char* what) {
  size_t bytes = 0;
  (void)openInputFile(path, what, &bytes);
}

InputFile openInputFile(const std::string& path, const char* what, size_t* bytes) {
  const int fd = openRegularFile(path, bytes);
  FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    throw EngineError(path + ": cannot read the " + what + " (" + std::strerror(err) + ")");
  }
  return InputFile(f);
}

}  // namespace engine
