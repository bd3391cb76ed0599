// SPDX-License-Identifier: BSD-3-Clause
// ncclCollConfig_t as NCCL 2.32's nccl.h lays it out, for tests that pass a
// per-call config through the shim while the build's nccl.h may predate it.
// Initialized as NCCL_COLLCONFIG_INITIALIZER does (every attribute unset).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

namespace rcn::test {

struct CollConfig {
  size_t size = sizeof(CollConfig);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 23206;
  void* ext = nullptr;
  int minCTAs = INT_MIN, maxCTAs = INT_MIN, nvlsCTAs = INT_MIN, cgaClusterSize = INT_MIN;
  const char* algSelection = nullptr;
  int forceAlgSelection = 1;
  int ctaPolicy = INT_MIN;
  uint64_t userProfilerTag = 0;
  void* launchCompletionEvent = nullptr;
};

}  // namespace rcn::test
