// SPDX-License-Identifier: BSD-3-Clause
// How one point of the sweep is run: buffer slots, repeats, graphs. Every
// number here depends only on rank-invariant inputs, so all ranks issue the
// same sequence of collectives.
#pragma once

#include <cstddef>

namespace rcn::bench {

// Slots of one pool are this far apart at least (and so aligned): enough for
// NCCL symmetric windows and 16-byte vector access.
inline constexpr size_t kSlotAlign = 4096;
// At most this many buffer slots rotate; with the default 128 MB pool, every
// size from 256 KB up cycles through at least 64 MB per pool, more than H200's 60 MB L2.
inline constexpr size_t kMaxSlots = 256;
// Each trial moves about this many bytes of messages (bounded below and above).
inline constexpr size_t kTrialBytes = 512u << 20;

struct PointPlan {
  size_t bytes = 0;
  size_t count = 0;
  size_t stride = 0;      // bytes between slots
  size_t slots = 1;       // distinct send/recv buffer pairs the ops rotate through
  int opsPerTrial = 0;    // all-reduces per timed trial (a multiple of opsPerGraph)
  int warmupOps = 0;      // untimed all-reduces before the first trial
  int opsPerGraph = 0;
  int graphs = 0;         // graphs captured, each of opsPerGraph ops, covering every slot
};

// poolBytes: the size of each of the send and receive pools.
// rotate: false on the host backend (one slot: no GPU L2 to defeat).
PointPlan planPoint(size_t bytes, size_t elemSize, size_t poolBytes, int opsPerGraph, bool rotate);

// The slot used by op `op` of graph `graph` (graph mode) or by the op-th eager op.
inline size_t slotOf(const PointPlan& p, int graph, int op) {
  return (static_cast<size_t>(graph) * p.opsPerGraph + op) % p.slots;
}

}  // namespace rcn::bench
