// SPDX-License-Identifier: BSD-3-Clause
// Where the one-shot protocol keeps things inside a rank's exchange region.
// The layout is the device kernels' own (kernels/one_shot.h regionLayout:
// flag[2][nranks][blocks], slot[2][nranks][slotBytes], then the LL lines
// line[2][nranks][llSlotBytes] where the proxy path uses them), so the host
// backend, the proxy kernel and the p2p kernel agree byte for byte; this
// adds the host-side offsets and the wire's view of it.
// Call k uses phase k % 2. Rank r's own slot doubles as its send staging
// area: puts copy it into slot[phase][r] of every peer, so one registered
// region serves as both the RDMA source and target.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/one_shot.h"
#include "transport/wire/wire.h"

namespace rcn {

struct ExchangeLayout {
  static constexpr int kPhases = 2;
  int nranks = 0;
  int blocks = 1;  // flags per (phase, rank): one per kernel block
  RegionLayout region{};

  static ExchangeLayout make(int nranks, size_t maxBytes, int blocks, size_t llMaxBytes = 0) {
    ExchangeLayout L;
    L.nranks = nranks;
    L.blocks = blocks;
    L.region = regionLayout(nranks, maxBytes, blocks, llMaxBytes, /*keepSlots=*/true);
    return L;
  }
  size_t slotBytes() const { return region.slotBytes; }
  size_t slotOffset(int phase, int rank) const { return region.slotOffset(phase, rank, nranks); }
  size_t llSlotBytes() const { return region.llSlotBytes; }
  size_t llSlotOffset(int phase, int rank) const { return region.llSlotOffset(phase, rank, nranks); }
  size_t flagIndex(int phase, int rank, int block = 0) const {
    return RegionLayout::flagIndex(phase, rank, block, nranks, blocks);
  }
  WireLayout wireLayout() const {
    WireLayout w;
    w.regionBytes = region.totalBytes;
    w.flagOffset = region.flagsOffset;
    w.flagCount = size_t(kPhases) * nranks * blocks;
    return w;
  }
};

}  // namespace rcn
