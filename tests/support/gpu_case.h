// SPDX-License-Identifier: BSD-3-Clause
// requireGpus(n) for Catch2 test cases: on a machine with fewer than n GPUs it
// skips this case only (Catch2's SKIP, which names what is missing), so the
// cases that fit the machine still run: a 1-GPU host runs every 1-GPU case
// and reports the 2-GPU ones as skipped. A program whose every case skipped
// (no GPU at all) exits 77, ctest's skip (tests/catch_main.cc).
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <memory>

#include "support/gpu.h"
#include "support/scoped_env.h"

namespace rcn::test {

inline void requireGpus(int n) {
  const int have = gpuCount();
  if (have >= n || (have >= 1 && shareGpus())) return;
  SKIP("needs " << n << " GPU(s), found " << have << " (ROCENANTE_TEST_SHARE_GPUS=1 runs it on fewer)");
}

// For cases that go through NCCL, which refuses two ranks on one GPU: never shared.
inline void requireOwnGpus(int n) {
  const int have = gpuCount();
  if (have < n) SKIP("needs " << n << " GPU(s), one per rank (NCCL's rule), found " << have);
}

// While it lives, and only where `ranks` ranks share fewer GPUs (a case that
// requireGpus let run under ROCENANTE_TEST_SHARE_GPUS): ROCENANTE_NATIVE_NCCL=0,
// so that native communicators are made without the NCCL communicator NCCL
// would refuse there. Forked ranks inherit it.
class NativeNcclUnlessShared {
 public:
  explicit NativeNcclUnlessShared(int ranks) {
    if (gpuCount() < ranks) env_ = std::make_unique<ScopedEnv>("ROCENANTE_NATIVE_NCCL", "0");
  }

 private:
  std::unique_ptr<ScopedEnv> env_;
};

}  // namespace rcn::test
