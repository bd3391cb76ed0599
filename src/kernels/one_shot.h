// SPDX-License-Identifier: BSD-3-Clause
// The push-model one-shot all-reduce kernel, as the host sees it: the device
// view of a communicator's exchange regions, the grid choice, and one launch
// entry per (dtype, op). Transports fill OneShotArgs; nothing here allocates.
//
// Two protocols share one exchange region layout (see regionLayout):
//  - flags: block b writes its slice into slot[phase][me] of every peer, then
//    raises flag[phase][me][b] = tag on every peer (release, system scope)
//    and waits for every peer's flag; the data moves with 16-byte stores.
//  - ll (low latency): every 16-byte store carries 8 bytes of data and two
//    copies of the tag, so the reader polls the data itself and no
//    fence or separate flag is needed; half the bandwidth, one NVLink trip.
// The tag is the call number and the call's signature (callSignature) in
// one odd word; a reader clears what it took, so a flag or line holds 0 or
// this call's tag, and any other value is a peer's different call.
// The call number (epoch) lives in device memory and the kernel advances it,
// so CUDA graph replays stay in step on every rank. Hence one communicator's
// calls must be stream-ordered (one stream, or streams ordered by events).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "rocenante/rocenante.h"

namespace rcn {

constexpr int kOneShotMaxRanks = RCN_DEVICE_MAX_RANKS;  // the device API maps every rank's window

// Per-communicator, per-rank device state (local, never shared with peers):
// word 0 is `failed` (set once a wait timed out or was aborted: later calls
// do nothing), words 1..maxBlocks the call counter of each block slot.
// Block b of a call reads slot b; at its end it writes the call number to
// slots b, b + grid, b + 2 grid, ... so every slot advances once per call
// whatever the grid size, without atomics or fences (the next kernel on the
// stream sees them). Call k uses epoch k (k = slot + 1 at start).
constexpr size_t oneShotStateWords(int maxBlocks) { return 1 + static_cast<size_t>(maxBlocks); }

// What a failed wait leaves for the host, in host-mapped pinned memory: the
// record and codes the device API (rocenante.h) shares.
using OneShotError = rcnDeviceError;
constexpr uint32_t kOneShotOk = rcnWaitOk, kOneShotTimeout = rcnWaitTimeout, kOneShotAborted = rcnWaitAborted,
                   kOneShotBadUse = rcnWaitBadUse, kOneShotMismatch = rcnWaitMismatch;

// A call's signature: its collective, count, type and op hashed to 31 bits.
// Every rank tags its flags and lines with it beside the call number, so a
// peer that made another call (collective, count, type or op) is an error,
// not a sum of unlike buffers. Two different calls share a signature with
// odds of 2^-31. collective: a Collective (core/policy.h) as a number, 0
// for the all-reduce.
uint32_t callSignature(size_t count, rcnDataType_t dtype, rcnRedOp_t op, int collective = 0);

// What a call writes into flags and lines (the proxy's host threads into
// flags too): odd, so never the 0 of a cleared one; calls 2 apart (the same
// phase) differ, and so do two calls of one number whose signatures differ.
__host__ __device__ inline uint32_t callTag(uint32_t call, uint32_t signature) {
  return ((call << 1) | 1u) ^ (signature << 1);
}

// Byte offsets inside each rank's exchange region; identical on every rank.
struct RegionLayout {
  size_t flagsOffset;    // uint32 flag[2][nranks][maxBlocks]
  size_t slotsOffset;    // slot[2][nranks][slotBytes]
  size_t slotBytes;      // maxBytes rounded up to 16; 0 when LL takes every size
  size_t llOffset;       // line[2][nranks][llSlotBytes]: 16-byte lines of 8 data bytes + 2 flags
  size_t llSlotBytes;    // 2 * llMaxBytes rounded up to 64
  size_t windowOffset;   // the device API's window (rcnDeviceComm): uint64 unit[2][nranks][windowValues]
  size_t windowValues;   // 0: no window (the proxy path never has one)
  size_t totalBytes;

  // Where rank `from`'s part of call phase `phase` lies inside any rank's
  // region. The p2p kernel, the proxy kernel and the host side
  // (ExchangeLayout) all ask here, so they agree byte for byte.
  __host__ __device__ size_t slotOffset(int phase, int from, int nranks) const {
    return slotsOffset + (static_cast<size_t>(phase) * nranks + from) * slotBytes;
  }
  __host__ __device__ size_t llSlotOffset(int phase, int from, int nranks) const {
    return llOffset + (static_cast<size_t>(phase) * nranks + from) * llSlotBytes;
  }
  // Index, among the region's uint32 flags, of block `block`'s flag.
  __host__ __device__ static size_t flagIndex(int phase, int from, size_t block, int nranks, int maxBlocks) {
    return (static_cast<size_t>(phase) * nranks + from) * maxBlocks + block;
  }
};
// keepSlots: separate-flag slots for every size even where LL could take
// them all (the proxy path decides per wire, after the region exists).
// windowValues: floats one device-API call exchanges (0: no window).
RegionLayout regionLayout(int nranks, size_t maxBytes, int maxBlocks, size_t llMaxBytes,
                          bool keepSlots = false, size_t windowValues = 0);

// The fields every all-reduce kernel (this one, the proxy path's) starts
// with: the call's buffers and this rank's place. Each kernel's own argument
// struct derives from it and adds its exchange regions and state.
struct AllReduceCallArgs {
  const void* send;
  void* recv;
  size_t count;
  int rank;
  int nranks;
  int maxBlocks;
  uint32_t signature;  // callSignature of this call
};

struct OneShotArgs : AllReduceCallArgs {
  char* region[kOneShotMaxRanks];  // every rank's exchange region, mapped here
  RegionLayout layout;
  uint32_t* state;                   // device memory, oneShotStateWords(maxBlocks) words
  OneShotError* error;               // device pointer to host-mapped memory
  const volatile uint32_t* abortFlag;  // device pointer to host-mapped memory
  uint64_t timeoutNs;
};

// Launch attribute: let the next kernel on the stream start its launch while
// this one runs (programmatic dependent launch); each kernel still waits for
// the previous one to finish before touching memory.
struct OneShotLaunchOptions {
  bool programmaticLaunch = false;
};

enum class OneShotProtocol { Flags, LL };

struct OneShotGrid {
  OneShotProtocol protocol;
  int blocks;
  int threads;
};

// The grid depends only on values agreed on every rank (bytes and the
// communicator's limits), never on pointers: every rank must use the same
// protocol and block count, because block b waits for block b of each peer.
OneShotGrid oneShotGrid(size_t bytes, size_t llMaxBytes, int maxBlocks, int threads);

// Loads every instance on the current device now (preloadKernels in
// kernel_launch.cuh says why).
rcnResult_t preloadOneShotKernels();

// Enqueues one all-reduce. Assumes checked arguments: count * size <= maxBytes,
// pointers aligned to the element size.
rcnResult_t launchOneShot(const OneShotArgs& args, rcnDataType_t dtype, rcnRedOp_t op,
                          const OneShotGrid& grid, const OneShotLaunchOptions& options,
                          cudaStream_t stream);

}  // namespace rcn
