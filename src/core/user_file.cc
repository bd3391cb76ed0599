#include "core/user_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace rcn {

bool readConfigFile(const std::string& path, std::string* text, std::string* why) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    *why = path + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    *why = path + ": not a regular file";
    return false;
  }
  if (size_t(st.st_size) > kMaxConfigFileBytes) {
    *why = path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
           std::to_string(kMaxConfigFileBytes >> 20) + " MB a configuration file may have";
    return false;
  }
  std::ifstream in(path);
  if (!in) {
    *why = path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  *text = contents.str();
  return true;
}

FILE* openOutputFile(const std::string& path, bool append, std::string* why) {
  // O_NONBLOCK only for the open itself: it fails with ENXIO on a FIFO no one reads.
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) {
    *why = path + ": " + (errno == ENXIO ? std::string("a FIFO with no reader") : std::strerror(errno));
    return nullptr;
  }
  const int flags = fcntl(fd, F_GETFL);
  FILE* f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, append ? "a" : "w") : nullptr;
  if (!f) {
    *why = path + ": " + std::strerror(errno);
    close(fd);
  }
  return f;
}

bool writeOutputFile(const std::string& path, const std::string& text, std::string* why) {
  FILE* f = openOutputFile(path, false, why);
  if (!f) return false;
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int writeErrno = errno;
  const bool closed = std::fclose(f) == 0;  // a full disk may show only here
  if (written && closed) return true;
  *why = path + ": " + std::strerror(written ? errno : writeErrno);
  return false;
}

}  // namespace rcn
