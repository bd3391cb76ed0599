// SPDX-License-Identifier: BSD-3-Clause
// Inputs and checks for rcnAllReduceResidualRmsNorm tests: every rank's
// partial rows, the residual and weight as pure functions of a seed; the
// fp64 reference of the unfused sequence (all-reduce, residual add, RMSNorm)
// with per-element bounds; and the exact bits every path must give
// (rcnAllReduce's sum in rank order, then the CPU mirror of the norm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn::test {

struct NormCase {
  size_t tokens = 1;
  size_t hidden = 4096;
  rcnDataType_t dtype = rcnBfloat16;
  rcnDataType_t normType = rcnBfloat16;
  float eps = 1e-5f;
  float scale = 1.0f;  // the e4m3 output's scale (normType rcnFloat8e4m3)
};

std::string describe(const NormCase& c);

struct NormInputs {
  std::vector<std::vector<uint8_t>> partial;  // [rank]: tokens x hidden, dtype
  std::vector<uint8_t> residual;              // tokens x hidden, dtype (the same on every rank)
  std::vector<uint8_t> weight;                // hidden, dtype
};

NormInputs makeNormInputs(const NormCase& c, int nranks, uint64_t seed);

// What every rank must hold after the call, bit for bit.
struct NormOutputs {
  std::vector<uint8_t> residual;  // dtype
  std::vector<uint8_t> normOut;   // normType
};
NormOutputs expectedNormOutputs(const NormCase& c, const NormInputs& in);

// got against the fp64 unfused sequence: the residual within the two
// roundings of the sum and of the add, the norm within its output rounding
// of the fp64 norm of got's own residual. Empty when both hold, else the
// first bad element.
std::string checkNormAgainstFp64(const NormCase& c, const NormInputs& in, const NormOutputs& got);

// The first byte where two outputs differ, or empty.
std::string firstDifference(const NormOutputs& a, const NormOutputs& b);

}  // namespace rcn::test
