// Where the one-shot protocol keeps things inside a rank's exchange region:
//   slot[phase][rank][slotBytes]  then  flag[phase][rank][block]
// Call k uses phase k % 2. Rank r's own slot doubles as its send staging
// area: puts copy it into slot[phase][r] of every peer, so one registered
// region serves as both the RDMA source and target.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/wire/wire.h"

namespace rcn {

struct ExchangeLayout {
  static constexpr int kPhases = 2;
  int nranks = 0;
  int blocks = 1;          // flags per (phase, rank): one per kernel block
  size_t slotBytes = 0;    // a multiple of 64

  size_t slotOffset(int phase, int rank) const {
    return (size_t(phase) * nranks + rank) * slotBytes;
  }
  size_t flagIndex(int phase, int rank, int block = 0) const {
    return (size_t(phase) * nranks + rank) * blocks + block;
  }
  WireLayout wireLayout() const {
    WireLayout w;
    w.dataBytes = size_t(kPhases) * nranks * slotBytes;
    w.flagCount = size_t(kPhases) * nranks * blocks;
    return w;
  }
};

}  // namespace rcn
