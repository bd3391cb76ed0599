// The #wrong column: each rank computes, in double precision on its CPU, the
// expected all-reduce of every rank's pattern input and counts the output
// elements that differ by more than the rounding the data type allows.
// Outputs are poisoned with NaN before each checked run, so an element that
// was never written counts as wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn::bench {

// The expected output of one all-reduce, as float (exact for the pattern's
// values) plus the allowed absolute error of each element.
struct Expected {
  rcnDataType_t dtype = rcnBfloat16;
  std::vector<float> value;
  std::vector<float> tolerance;
};

// Computes the expected result of reducing the pattern of ranks 0..nranks-1.
void computeExpected(uint64_t seed, int nranks, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                     Expected* out);

// Elements of out (count elements of expected.dtype) that do not match.
long long countWrong(const void* out, const Expected& expected);

// Fills a host buffer with rank's pattern (host backend; device buffers use
// sweep_fill.cu, which writes the same bits).
void fillPatternHost(void* dst, size_t count, rcnDataType_t dtype, uint64_t seed, int rank);

// A seed unique to one (size, method, mode) point, so every point runs on fresh inputs.
uint64_t pointSeed(size_t bytes, int method, int mode);

// Host conversions (round to nearest even; NaN stays NaN).
uint16_t floatToBf16Bits(float f);
float bf16BitsToFloat(uint16_t bits);
uint16_t floatToHalfBits(float f);
float halfBitsToFloat(uint16_t bits);

}  // namespace rcn::bench
