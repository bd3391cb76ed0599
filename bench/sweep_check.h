// SPDX-License-Identifier: BSD-3-Clause
// The #wrong column. For each size, every rank builds every rank's pattern
// input on its CPU and the float64 reference of their all-reduce with
// tests/support/reference.h (the same reference the library's tests use);
// both are reused by every method and mode at that size. Outputs are
// poisoned before each checked run, so an element never written counts.
// There are three input sets, the pattern from element 0, 1 and 2: the timed
// runs use set 2, the checked run cycles 0, 1, 2 slot by slot, so no call of
// the checked run has the inputs of either call before it (the one-shot
// alternates two halves of its exchange, so the call two back is the one whose
// bytes a call that reads a peer's data before it arrives would find): such a
// call counts wrong rather than passing on identical stale bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rocenante/rocenante.h"
#include "support/reference.h"

namespace rcn::bench {

inline constexpr int kInputSets = 3;

struct SizeData {
  size_t bytes = 0;
  size_t count = 0;
  size_t elemBytes = 0;
  rcnDataType_t dtype = rcnBfloat16;
  std::vector<std::vector<char>> inputs;  // inputs[r]: rank r's count + kInputSets - 1 elements (every set)
  rcn::test::Reference reference;         // as many values; empty when the check is off
  std::vector<char> expectedBits;         // the reference stored in dtype: what a correct result holds

  // Rank r's count elements of input set `set` (0 to kInputSets - 1).
  const char* input(int r, int set) const { return inputs[r].data() + size_t(set) * elemBytes; }
};

// The pattern of every rank (and, when withReference, the reference) for one size.
void makeSizeData(uint64_t seed, int nranks, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                  bool withReference, SizeData* out);

// Elements of out (count elements) farther from the reference of input set
// `set` than its tolerance. The pattern's results are exact, so a correct
// output is bit-identical to expectedBits: a memcmp settles most checks; only
// a mismatch is counted element by element.
long long countWrong(const void* out, const SizeData& data, int set = 0);

// Writes rank's pattern into dst (count elements of dtype).
void fillPattern(void* dst, size_t count, rcnDataType_t dtype, uint64_t seed, int rank);

// Outputs are filled with this byte before each checked run: 0xFFFF and
// 0xFFFFFFFF are NaN in bf16, fp16 and fp32, which no tolerance accepts. (The
// tests' kPoisonByte is a tiny number instead; the pattern's sums are often
// exactly 0, and a tiny number would pass as 0.)
inline constexpr unsigned char kPoison = 0xff;

// A seed unique to one size, so every size runs on fresh inputs.
uint64_t sizeSeed(size_t bytes);

}  // namespace rcn::bench
