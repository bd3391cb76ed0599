// SPDX-License-Identifier: BSD-3-Clause
// The test programs' main: Catch2's own, except that a run in which every
// case was skipped (e.g. every case needs a GPU and there is none) exits with
// 77, which ctest reports as skipped rather than failed. The run's totals
// say so, not Catch2's exit code: before Catch2 3.7.1 that code counted
// failures, so 4 of them would have read as "all skipped".
#include <catch2/catch_session.hpp>
#include <catch2/reporters/catch_reporter_event_listener.hpp>
#include <catch2/reporters/catch_reporter_registrars.hpp>

namespace {

bool everyCaseSkipped = false;

class SkipListener : public Catch::EventListenerBase {
 public:
  using Catch::EventListenerBase::EventListenerBase;
  void testRunEnded(const Catch::TestRunStats& stats) override {
    const Catch::Counts& cases = stats.totals.testCases;
    everyCaseSkipped = cases.total() > 0 && cases.skipped == cases.total();
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipListener)

int main(int argc, char** argv) {
  constexpr int kCtestSkipped = 77;
  const int rc = Catch::Session().run(argc, argv);
  return everyCaseSkipped ? kCtestSkipped : rc;
}
