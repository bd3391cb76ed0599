// The test programs' main: Catch2's own, except that a run in which every
// case was skipped (Catch2 exits with 4: e.g. every case needs a GPU and there
// is none) exits with 77, which ctest reports as skipped rather than failed.
#include <catch2/catch_session.hpp>

int main(int argc, char** argv) {
  constexpr int kCatchAllSkipped = 4;
  constexpr int kCtestSkipped = 77;
  const int rc = Catch::Session().run(argc, argv);
  return rc == kCatchAllSkipped ? kCtestSkipped : rc;
}
