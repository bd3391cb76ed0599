// SPDX-License-Identifier: BSD-3-Clause
// What the fuzz targets share: the input as a file the readers can open
// (they take paths), a directory holding one named file, and the input read
// as a run of fixed-size messages (the network frames' targets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
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

// Reads the input front to back: take() copies the next sizeof(T) bytes
// into a message (false, and nothing copied, when fewer are left).
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), left_(size) {}
  template <typename T>
  bool take(T* out) {
    return takeBytes(out, sizeof(T));
  }
  bool takeBytes(void* out, size_t bytes) {
    if (bytes > left_) return false;
    if (bytes) std::memcpy(out, data_, bytes);
    data_ += bytes;
    left_ -= bytes;
    return true;
  }
  // One byte, or 0 once the input is spent.
  uint8_t byte() {
    uint8_t b = 0;
    takeBytes(&b, 1);
    return b;
  }
  size_t left() const { return left_; }

 private:
  const uint8_t* data_;
  size_t left_;
};

}  // namespace rcn::fuzz
