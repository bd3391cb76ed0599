// SPDX-License-Identifier: BSD-3-Clause
// Opening the engine's input files (checkpoints, tokenizers, JSON): only a
// regular file will do. A FIFO would block the open or the first read for
// ever, /dev/zero never ends, and a directory or a pipe from a shell's <(...)
// cannot be sized; each gets a message naming the path instead.
#pragma once

#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>

namespace engine {

// Opens path to read; throws EngineError naming it unless it is a regular
// file. *bytes: its size. The caller owns (and closes) the descriptor.
int openRegularFile(const std::string& path, size_t* bytes);

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using InputFile = std::unique_ptr<FILE, FileCloser>;

// The same as a stdio stream; what: the kind of file, for the messages
// ("llama2.c checkpoint").
InputFile openInputFile(const std::string& path, const char* what, size_t* bytes);

// Throws as openInputFile would, without keeping the file open.
void requireReadable(const std::string& path, const char* what);

}  // namespace engine
