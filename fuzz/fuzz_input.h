// SPDX-License-Identifier: BSD-3-Clause
// What the fuzz targets share: the input as a file the readers can open
// (they take paths), and a directory holding one named file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

namespace rcn::fuzz {

// An anonymous in-memory file (memfd) holding the input; path() opens it
// (/proc/self/fd/N) as any reader opens a regular file. Closed on destruction.
class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// A directory made once per process; put() (re)writes one file in it.
// Removed, with the files put there, on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  void put(const std::string& name, const uint8_t* data, size_t size);

 private:
  std::string path_;
  std::set<std::string> names_;
};

}  // namespace rcn::fuzz
