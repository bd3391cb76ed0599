// SPDX-License-Identifier: BSD-3-Clause
// splitmix64's finalizer: every input bit moves about half the output bits.
// For hashes that must agree wherever they are computed (a call's signature
// on every rank, the sweep's input pattern on every rank).
#pragma once

#include <cstdint>

namespace rcn {

inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace rcn
