// SPDX-License-Identifier: BSD-3-Clause
#include "fuzz_input.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace rcn::fuzz {

namespace {

// A harness that cannot set up its input tells libFuzzer nothing useful:
// stop at once with the reason.
[[noreturn]] void die(const char* what) {
  perror(what);
  abort();
}

void writeAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n <= 0) die("fuzz input: write");
    data += n;
    size -= size_t(n);
  }
}

}  // namespace

InputFile::InputFile(const uint8_t* data, size_t size) {
  fd_ = memfd_create("rcn-fuzz-input", MFD_CLOEXEC);
  if (fd_ < 0) die("fuzz input: memfd_create");
  writeAll(fd_, data, size);
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

InputFile::~InputFile() { close(fd_); }

ScratchDir::ScratchDir() {
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/rcn-fuzz-XXXXXX";
  if (!mkdtemp(pattern.data())) die("fuzz input: mkdtemp");
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  for (const std::string& name : names_) unlink((path_ + "/" + name).c_str());
  rmdir(path_.c_str());
}

void ScratchDir::put(const std::string& name, const uint8_t* data, size_t size) {
  names_.insert(name);
  const std::string file = path_ + "/" + name;
  FILE* f = fopen(file.c_str(), "wb");
  if (!f) die(file.c_str());
  if (size > 0 && fwrite(data, 1, size, f) != size) die(file.c_str());
  if (fclose(f) != 0) die(file.c_str());
}

}  // namespace rcn::fuzz
