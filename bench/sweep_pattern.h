// SPDX-License-Identifier: BSD-3-Clause
// The input pattern every rank writes, computable anywhere: element i of rank
// r's input for a given seed is a fixed value, so each rank can compute every
// rank's input, and so the expected all-reduce, on its own CPU without any
// communication. Values are k/4 for k in -4..4: every partial sum, maximum and
// minimum of up to 64 ranks is exact in bf16, fp16 and fp32, so the check
// holds whatever order and precision a method reduces in (NCCL's ring rounds
// each step to the data type; rocenante accumulates in fp32).
#pragma once

#include <cstdint>

#include "core/mix64.h"

namespace rcn::bench {

inline double patternValue(uint64_t seed, int rank, uint64_t index) {
  // mix64 over (seed, rank, index): cheap and well mixed.
  const uint64_t x = mix64(seed ^ (static_cast<uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ull ^
                           index * 0xd1b54a32d192ed03ull);
  return static_cast<double>(static_cast<int>(x % 9) - 4) * 0.25;
}

}  // namespace rcn::bench
