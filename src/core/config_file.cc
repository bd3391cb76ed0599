#include "core/config_file.h"

#include <sys/stat.h>

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

}  // namespace rcn
