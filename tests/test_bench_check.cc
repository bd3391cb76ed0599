// SPDX-License-Identifier: BSD-3-Clause
// allreduce_sweep's #wrong check: the input pattern and the count of output
// elements that miss the float64 reference (tests/support/reference.h).
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "support/reference.h"
#include "sweep_check.h"
#include "sweep_pattern.h"

using namespace rcn::bench;
using rcn::test::loadElement;
using rcn::test::storeElement;

namespace {

// What a method writes that reduces rank by rank and rounds every partial
// sum to the data type (NCCL's ring does): exact for the pattern. Of input set `set`.
std::vector<char> reduceRoundingEachStep(const SizeData& d, int set = 0) {
  std::vector<char> out(d.bytes);
  for (size_t i = 0; i < d.count; ++i) {
    storeElement(out.data(), i, d.dtype, loadElement(d.input(0, set), i, d.dtype));
    for (size_t r = 1; r < d.inputs.size(); ++r)
      storeElement(out.data(), i, d.dtype,
                   loadElement(out.data(), i, d.dtype) + loadElement(d.input(int(r), set), i, d.dtype));
  }
  return out;
}

}  // namespace

TEST_CASE("pattern: quarters in [-1, 1] that differ by rank, index and seed") {
  int differ = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    double v = patternValue(7, 0, i);
    CHECK(v >= -1.0);
    CHECK(v <= 1.0);
    CHECK(v * 4 == std::floor(v * 4));
    differ += patternValue(7, 0, i) != patternValue(7, 1, i);
    differ += patternValue(7, 0, i) != patternValue(8, 0, i);
  }
  CHECK(differ > 1500);
  CHECK(sizeSeed(1024) != sizeSeed(2048));
}

TEST_CASE("check: results rounded at every step are still exact, in every type, up to 64 ranks") {
  for (rcnDataType_t t : {rcnBfloat16, rcnFloat16, rcnFloat32}) {
    for (int nranks : {2, 8, 64}) {
      SizeData d;
      makeSizeData(42, nranks, 2048, t, rcnSum, true, &d);
      CHECK(d.bytes == 2048 * rcn::dtypeSize(t));
      std::vector<char> out = reduceRoundingEachStep(d);
      CHECK(countWrong(out.data(), d) == 0);
    }
  }
}

TEST_CASE("check: poisoned, corrupted, stale and partial outputs are counted") {
  SizeData d;
  makeSizeData(1, 2, 1000, rcnBfloat16, rcnSum, true, &d);
  std::vector<char> good = reduceRoundingEachStep(d);
  REQUIRE(countWrong(good.data(), d) == 0);
  std::vector<char> poisoned(good.size(), static_cast<char>(kPoison));
  CHECK(countWrong(poisoned.data(), d) == 1000);
  std::vector<char> corrupted = good;
  storeElement(corrupted.data(), 10, rcnBfloat16, loadElement(corrupted.data(), 10, rcnBfloat16) + 0.25);
  CHECK(countWrong(corrupted.data(), d) == 1);
  SizeData other;
  makeSizeData(2, 2, 1000, rcnBfloat16, rcnSum, true, &other);  // another size's inputs
  CHECK(countWrong(reduceRoundingEachStep(other).data(), d) > 500);
  CHECK(countWrong(d.inputs[0].data(), d) > 500);  // a peer's contribution missing
}

// The timed runs and the checked run's slots take turns among the input sets,
// so a call that returned an earlier call's result (it read a peer's exchange
// before the new data came) is counted, not passed as identical bytes.
TEST_CASE("check: the input sets differ, each has its own reference, and one passes for another never") {
  for (rcnDataType_t t : {rcnBfloat16, rcnFloat32}) {
    SizeData d;
    makeSizeData(9, 4, 3000, t, rcnSum, true, &d);
    for (int r = 0; r < 4; ++r)
      for (size_t i = 0; i < 3000; ++i)
        for (int set = 0; set < kInputSets; ++set)
          REQUIRE(loadElement(d.input(r, set), i, t) == patternValue(9, r, i + set));  // the pattern from element `set`
    for (int set = 0; set < kInputSets; ++set) {
      const std::vector<char> out = reduceRoundingEachStep(d, set);
      for (int other = 0; other < kInputSets; ++other)  // another set's result: stale, an earlier call's
        CHECK((countWrong(out.data(), d, other) == 0) == (set == other));
      CHECK(countWrong(out.data(), d, (set + 1) % kInputSets) > 2000);
    }
  }
}

TEST_CASE("check: max and min, and no reference when the check is off") {
  SizeData d;
  makeSizeData(3, 4, 100, rcnFloat32, rcnMax, true, &d);
  for (size_t i = 0; i < 100; ++i) {
    double m = patternValue(3, 0, i);
    for (int r = 1; r < 4; ++r) m = std::fmax(m, patternValue(3, r, i));
    CHECK(d.reference.value[i] == m);
  }
  SizeData off;
  makeSizeData(3, 4, 100, rcnFloat32, rcnSum, false, &off);
  CHECK(off.reference.value.empty());
  CHECK(off.inputs.size() == 4);
}

TEST_CASE("check: each rank's input holds the pattern in the data type") {
  SizeData d;
  makeSizeData(9, 3, 64, rcnFloat16, rcnSum, false, &d);
  for (int r = 0; r < 3; ++r)
    for (size_t i = 0; i < 64; ++i) CHECK(loadElement(d.inputs[r].data(), i, rcnFloat16) == patternValue(9, r, i));
}
