#include "topology/sysfs.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace rcn {

std::string joinPath(const std::string& root, const std::string& path) {
  std::string a = root;
  while (a.size() > 1 && a.back() == '/') a.pop_back();
  std::string b = path;
  while (!b.empty() && b.front() == '/') b.erase(0, 1);
  if (a == "/" || a.empty()) return "/" + b;
  return a + "/" + b;
}

bool readFirstLine(const std::string& path, std::string* line) {
  std::ifstream in(path);
  if (!in) return false;
  std::string text;
  std::getline(in, text);
  if (in.bad()) return false;
  *line = trim(text);
  return true;
}

bool readWholeFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  return true;
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
