// SPDX-License-Identifier: BSD-3-Clause
// The start, end and waits of a call of the p2p one-shot kernels
// (kernels/one_shot.cu: all-reduce; kernels/one_shot_collectives.cu:
// all-gather and reduce-scatter; kernels/residual_norm.cu: the all-reduce
// fused with the residual add and RMSNorm): they share one call counter, one
// exchange region layout and one failure record, so the helpers are one.
#pragma once

#include <cstdint>

#include "kernels/device_common.cuh"
#include "kernels/one_shot.h"

namespace rcn {

// Internal linkage in each kernel file, as device_common.cuh.
namespace {

// ---- bounded waits ---------------------------------------------------------

// Word 0 of the state is this communicator's device `failed` flag.
__device__ void recordError(const OneShotArgs& a, uint32_t code, int peer, uint32_t call) {
  recordFirstError(&a.state[0], a.error, code, peer, call);
}

// The host-mapped abort flag is read every 4096 spins, by one lane per warp:
// in LL every thread of the block waits, and host reads are slow.
__device__ inline uint32_t waitCheck(WaitBudget& budget, const OneShotArgs& a) {
  return budget.check(a.timeoutNs, &a.state[0], a.abortFlag, 4095u, /*onePerWarp=*/true);
}

// ---- the start and end of every call --------------------------------------

// The call number of this block's slot; 0 when an earlier call failed.
__device__ inline uint32_t callNumber(const OneShotArgs& a) {
  const uint32_t failed = __ldcg(a.state);
  const uint32_t call = nextCallNumber(__ldcg(a.state + 1 + blockIdx.x));
  return failed ? 0 : call;
}

// Advances every slot this block owns. Callers have passed a block barrier
// since reading the slot, so no thread of this block still needs it.
__device__ void finishCall(const OneShotArgs& a, uint32_t call) {
  for (int j = blockIdx.x + threadIdx.x * gridDim.x; j < a.maxBlocks; j += blockDim.x * gridDim.x)
    a.state[1 + j] = call;
}

__device__ inline char* slotOf(const OneShotArgs& a, int owner, int phase, int from) {
  return a.region[owner] + a.layout.slotOffset(phase, from, a.nranks);
}

__device__ inline uint32_t* flagOf(const OneShotArgs& a, int owner, int phase, int from) {
  return reinterpret_cast<uint32_t*>(a.region[owner] + a.layout.flagsOffset) +
         RegionLayout::flagIndex(phase, from, blockIdx.x, a.nranks, a.maxBlocks);
}

__device__ inline uint4* linesOf(const OneShotArgs& a, int owner, int phase, int from) {
  return reinterpret_cast<uint4*>(a.region[owner] + a.layout.llSlotOffset(phase, from, a.nranks));
}

// Sizes on two sides of the LL limit put the ranks in different protocols,
// each waiting where the other never writes. So whenever a wait looks at
// the clock, it also looks where the other protocol would have left the
// peer's mark in this rank's region: waiting in LL, at the peer's flag of
// block 0; waiting for a flag, at the peer's first LL line. Each is 0 unless
// the peer runs that protocol in this very call (a reader clears what it
// took, and a peer cannot be two calls ahead), so anything else is the
// peer's different call: kOneShotMismatch.
__device__ inline bool peerUsesOtherProtocol(const OneShotArgs& a, int phase, int peer, bool waitingInLL) {
  if (waitingInLL) return peerFlagRaised(a.region[a.rank], a.layout, phase, peer, a.nranks, a.maxBlocks);
  if (a.layout.llSlotBytes == 0) return false;  // no LL lines: every call uses flags
  const uint4 line = loadLine(linesOf(a, a.rank, phase, peer));
  return line.y != 0 || line.w != 0;
}

// waitCheck, and the look above each time the budget read the clock.
__device__ inline uint32_t waitCheckPeer(WaitBudget& budget, const OneShotArgs& a, int phase, int peer,
                                         bool waitingInLL) {
  const uint32_t why = waitCheck(budget, a);
  if (why != kOneShotOk || !budget.lookedNow()) return why;
  return peerUsesOtherProtocol(a, phase, peer, waitingInLL) ? kOneShotMismatch : kOneShotOk;
}

}  // namespace

}  // namespace rcn
