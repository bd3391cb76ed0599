// SPDX-License-Identifier: BSD-3-Clause
// Catch2 checks over forked ranks (support/multiproc.h): every rank must exit
// 0, and how each one ended goes into the failure message. Header-only: the
// support library itself does not link Catch2.
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "support/multiproc.h"

namespace rcn::test {

// CHECKs that every rank in `outcomes` exited 0; `what` names the case.
inline void checkRanks(const std::vector<RankOutcome>& outcomes, const std::string& what = "") {
  std::string report;
  const bool ok = allSucceeded(outcomes, &report);
  INFO((what.empty() ? report : what + ": " + report));
  CHECK(ok);
}

// Runs body in one forked process, so that this process never touches CUDA;
// an exception it throws is printed and fails it.
inline void checkInOneRank(const std::function<int()>& body, const std::string& what = "") {
  auto outcomes = runRanks(1, [&](int) -> int {
    try {
      return body();
    } catch (const std::exception& e) {
      std::printf("%s\n", e.what());
      return 1;
    }
  });
  checkRanks(outcomes, what);
}

}  // namespace rcn::test
