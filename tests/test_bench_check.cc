// allreduce_sweep's #wrong check: the pattern, the CPU reference and the
// host conversions it uses.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "sweep_check.h"
#include "sweep_pattern.h"

using namespace rcn::bench;

namespace {

// What a correct all-reduce of the pattern writes, reduced in the output type
// rank by rank (the way a ring would round), to show the check accepts it.
std::vector<char> reduceInType(uint64_t seed, int nranks, size_t count, rcnDataType_t t) {
  size_t esize = t == rcnFloat32 ? 4 : 2;
  std::vector<char> out(count * esize);
  for (size_t i = 0; i < count; ++i) {
    float acc = patternValue(seed, 0, i);
    for (int r = 1; r < nranks; ++r) {
      acc += patternValue(seed, r, i);
      if (t == rcnBfloat16) acc = bf16BitsToFloat(floatToBf16Bits(acc));
      if (t == rcnFloat16) acc = halfBitsToFloat(floatToHalfBits(acc));
    }
    if (t == rcnFloat32) {
      std::memcpy(&out[i * 4], &acc, 4);
    } else {
      uint16_t bits = t == rcnBfloat16 ? floatToBf16Bits(acc) : floatToHalfBits(acc);
      std::memcpy(&out[i * 2], &bits, 2);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("pattern: values are quarters in [-1, 1], differ by rank and seed") {
  int differ = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    float v = patternValue(7, 0, i);
    CHECK(v >= -1.0f);
    CHECK(v <= 1.0f);
    CHECK(v * 4 == std::floor(v * 4));
    differ += patternValue(7, 0, i) != patternValue(7, 1, i);
    differ += patternValue(7, 0, i) != patternValue(8, 0, i);
  }
  CHECK(differ > 1500);
}

TEST_CASE("check: a correct result in every type has no wrong elements") {
  for (rcnDataType_t t : {rcnBfloat16, rcnFloat16, rcnFloat32}) {
    for (int nranks : {2, 8, 64}) {
      Expected e;
      computeExpected(42, nranks, 4096, t, rcnSum, &e);
      std::vector<char> out = reduceInType(42, nranks, 4096, t);
      CHECK(countWrong(out.data(), e) == 0);
    }
  }
}

TEST_CASE("check: poisoned, corrupted and stale outputs are counted") {
  Expected e;
  computeExpected(1, 2, 1000, rcnBfloat16, rcnSum, &e);
  std::vector<char> out = reduceInType(1, 2, 1000, rcnBfloat16);
  std::vector<char> poisoned(out.size(), static_cast<char>(0xff));
  CHECK(countWrong(poisoned.data(), e) == 1000);
  std::vector<char> corrupted = out;
  uint16_t bits = floatToBf16Bits(bf16BitsToFloat(*reinterpret_cast<uint16_t*>(&corrupted[20])) + 0.25f);
  std::memcpy(&corrupted[20], &bits, 2);
  CHECK(countWrong(corrupted.data(), e) == 1);
  std::vector<char> stale = reduceInType(2, 2, 1000, rcnBfloat16);  // last point's seed
  CHECK(countWrong(stale.data(), e) > 500);
  std::vector<char> oneRank = reduceInType(1, 1, 1000, rcnBfloat16);  // a peer's part missing
  CHECK(countWrong(oneRank.data(), e) > 500);
}

TEST_CASE("check: max and min") {
  Expected e;
  computeExpected(3, 4, 100, rcnFloat32, rcnMax, &e);
  for (size_t i = 0; i < 100; ++i) {
    float m = patternValue(3, 0, i);
    for (int r = 1; r < 4; ++r) m = std::fmax(m, patternValue(3, r, i));
    CHECK(e.value[i] == m);
    CHECK(e.tolerance[i] == 0);
  }
}

TEST_CASE("check: host fill writes the same bits the reference expects") {
  std::vector<uint16_t> buf(64);
  fillPatternHost(buf.data(), 64, rcnBfloat16, 9, 1);
  for (size_t i = 0; i < 64; ++i) CHECK(bf16BitsToFloat(buf[i]) == patternValue(9, 1, i));
}

TEST_CASE("conversions: round to nearest even, specials") {
  CHECK(floatToBf16Bits(1.0f) == 0x3f80);
  CHECK(bf16BitsToFloat(0x3f80) == 1.0f);
  CHECK(floatToBf16Bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);       // tie -> even
  CHECK(floatToBf16Bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);   // tie -> even (up)
  CHECK(std::isnan(bf16BitsToFloat(floatToBf16Bits(NAN))));
  CHECK(floatToHalfBits(1.0f) == 0x3c00);
  CHECK(floatToHalfBits(-2.0f) == 0xc000);
  CHECK(floatToHalfBits(65504.0f) == 0x7bff);
  CHECK(floatToHalfBits(1e6f) == 0x7c00);
  CHECK(floatToHalfBits(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(halfBitsToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(floatToHalfBits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie -> even
  CHECK(floatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(std::isnan(halfBitsToFloat(0xffff)));
  for (uint32_t b = 0; b < 0x7c00; b += 7) CHECK(floatToHalfBits(halfBitsToFloat(static_cast<uint16_t>(b))) == b);
}
