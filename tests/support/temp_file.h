// SPDX-License-Identifier: BSD-3-Clause
// A file under /tmp holding the given text for a scope (a policy file, say),
// removed when the scope ends, even when a REQUIRE throws out of it.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace rcn::test {

class TempFile {
 public:
  explicit TempFile(const std::string& text, const char* prefix = "rcn_test") {
    std::string pattern = std::string("/tmp/") + prefix + "_XXXXXX";
    int fd = mkstemp(pattern.data());
    if (fd < 0) throw std::runtime_error("mkstemp " + pattern + " failed");
    path_ = pattern;
    FILE* f = fdopen(fd, "w");
    if (!f || std::fputs(text.c_str(), f) < 0 || std::fclose(f) != 0)
      throw std::runtime_error("cannot write " + path_);
  }
  ~TempFile() { unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace rcn::test
