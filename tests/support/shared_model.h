// SPDX-License-Identifier: BSD-3-Clause
// The small trained model the engine tests read from ../shared/models
// (stories260K and its tokenizer). It is never copied into the repository;
// where it is absent, the cases that need it skip and the others still run.
#pragma once

#include <fstream>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "core/params.h"

namespace rcn::test {

// ROCENANTE_SHARED_DIR (default ../shared) + /models/ + file, or "" when absent.
inline std::string sharedModelPath(const char* file) {
  std::string dir = paramStr(ParamId::SharedDir);
  if (dir.empty()) dir = "../shared";
  const std::string path = dir + "/models/" + file;
  return std::ifstream(path).good() ? path : "";
}

// The same path; skips the current test case when the file is absent.
inline std::string requireSharedModel(const char* file) {
  const std::string path = sharedModelPath(file);
  if (path.empty()) SKIP(file << " not found under ROCENANTE_SHARED_DIR (default ../shared)/models");
  return path;
}

}  // namespace rcn::test
