// The input pattern every rank writes, computable anywhere: element i of rank
// r's input for a given seed is a fixed value, so each rank can compute the
// expected all-reduce of every rank's input on its own CPU without any
// communication. Values are k/4 for k in -4..4: sums, maxima and minima of up
// to 8 ranks are exact in bf16, fp16 and fp32 whatever the reduction order.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RCN_BENCH_HD __host__ __device__
#else
#define RCN_BENCH_HD
#endif

namespace rcn::bench {

RCN_BENCH_HD inline float patternValue(uint64_t seed, int rank, uint64_t index) {
  // splitmix64's finalizer over (seed, rank, index): cheap and well mixed.
  uint64_t x = seed ^ (static_cast<uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ull ^
               index * 0xd1b54a32d192ed03ull;
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(static_cast<int>(x % 9) - 4) * 0.25f;
}

}  // namespace rcn::bench
