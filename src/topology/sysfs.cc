// SPDX-License-Identifier: BSD-3-Clause
#include "topology/sysfs.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>

#include "core/user_file.h"

namespace rcn {

std::string joinPath(const std::string& root, const std::string& path) {
  std::string a = root;
  while (a.size() > 1 && a.back() == '/') a.pop_back();
  std::string b = path;
  while (!b.empty() && b.front() == '/') b.erase(0, 1);
  if (a == "/" || a.empty()) return "/" + b;
  return a + "/" + b;
}

// Through readConfigFile: a FIFO, a device or an endless file under a
// --root tree is refused instead of hanging or filling memory. sysfs
// attributes are a page at most; /proc/modules and a fixture's ifaddrs.txt
// some KB.
constexpr size_t kMaxSysfsFileBytes = size_t(1) << 20;

bool readFirstLine(const std::string& path, std::string* line) {
  std::string text;
  if (!readWholeFile(path, &text)) return false;
  *line = trim(text.substr(0, text.find('\n')));
  return true;
}

bool readWholeFile(const std::string& path, std::string* text) {
  std::string why;
  return readConfigFile(path, text, &why, kMaxSysfsFileBytes);
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (!dir) return names;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name[0] != '.') names.push_back(name);  // sysfs has no dot files; fixtures have .keep
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string resolvePath(const std::string& path) {
  char buf[PATH_MAX];
  if (!realpath(path.c_str(), buf)) return "";
  return buf;
}

}  // namespace rcn
