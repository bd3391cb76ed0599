// SPDX-License-Identifier: BSD-3-Clause
// Device functions over rcnDeviceComm (rocenante.h): a one-shot all-reduce
// (sum) of float values done inside the caller's kernels (two on one stream,
// or one: below), so that it costs no kernel of its own. rcnCommGetDeviceComm gives the rcnDeviceComm;
// pass it to both kernels by value.
//
// One call, on every rank:
//  1. a producer kernel: each block, once every earlier kernel on the stream
//     has finished (after rcnDeviceWaitForPreviousKernels when launched
//     with PDL), takes
//     call = rcnDeviceCall(dev) and puts values with rcnDevicePut(dev, call,
//     i, v), every index i < count put once by the grid (count a multiple of
//     4: a gather reads whole groups of 4 and waits for every value in them);
//  2. a consumer kernel, later on the same stream: each block takes call =
//     rcnDeviceCall(dev) the same way, reads sums with rcnDeviceGather4(dev,
//     call, indices, sums) (any index < count, any block, as often as it
//     likes, but at least once per call on every rank: the waits of the
//     gathers are what keep a rank's next producer from overwriting values a
//     slower peer still reads), and, after a barrier that follows its last
//     gather, calls rcnDeviceEndCall(dev, call). Every block of the consumer
//     must call it, gathers or not.
// Both kernels launch at most dev.maxBlocks blocks, count <= dev.maxValues,
// and the calls of one communicator are ordered (one stream, or streams
// ordered by events); rcnAllReduce calls may come between them. Launched
// with PDL, a kernel that gathers lets the next kernel in
// (rcnDeviceLetNextKernelIn, below) only after its block's last gather:
// where ranks share a GPU, kernels let in earlier can take the room a peer's
// kernel needs, and both wait until the timeout.
// An all-gather instead of a sum: the consumer reads each rank's values as
// that rank put them with rcnDeviceGatherFrom4 (below), every rank's at
// least once per call.
// One kernel may also be both: each block puts, then gathers, then (after a
// barrier) ends the call, provided every index a block gathers was put on
// this rank by that same block. A block then never waits for another of its
// own grid, which might not be resident yet; the peers' blocks are other
// kernels on other GPUs, as with rcnAllReduce.
//
// The sum of index i is the values every rank put at i, added in rank order
// in fp32: the same bits on every rank. Values live in two phases (call & 1),
// so a producer never overwrites what a peer's consumer of the previous call
// may still read. Every wait is bounded by ROCENANTE_TIMEOUT_MS and gives up
// on rcnCommAbort; a failed wait records the communicator's error (reported
// by rcnCommGetAsyncError, which names the peer), its gather returns false,
// and every later call (rcnAllReduce's too) returns at once without waiting.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "rocenante/rocenante.h"

namespace rcn_device {

namespace detail {

__device__ inline uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Records the first failure of a communicator's calls: the device flag
// `failed` stops later calls, the record tells the host who was missing. The
// code is written last, so the host never reads half a record.
__device__ inline void recordFirstError(uint32_t* failed, rcnDeviceError* error, uint32_t code, int peer,
                                        uint32_t call) {
  if (atomicCAS(failed, 0u, 1u) != 0u) return;
  volatile rcnDeviceError* e = error;
  e->peer = static_cast<uint32_t>(peer);
  e->block = blockIdx.x;
  e->call = call;
  __threadfence_system();
  e->code = code;
  __threadfence_system();
}

// Spinning is cheap; the clock and the flags are read only every so many
// spins so that a healthy wait stays on local memory. check() returns rcnWaitOk
// while the wait may go on; rcnWaitTimeout once timeoutNs have passed since its
// first look at the clock; rcnWaitAborted once `failed` (another thread gave up) or
// the host's abort flag is set. The clock and `failed` are read every 64
// spins, the abort flag every hostMask + 1 (a multiple of 64) and, with
// onePerWarp, only by the lowest lane still spinning in each warp.
struct WaitBudget {
  uint32_t spins = 0;
  uint64_t start = 0;

  __device__ uint32_t check(uint64_t timeoutNs, const uint32_t* failed, const volatile uint32_t* abortFlag,
                            uint32_t hostMask, bool onePerWarp) {
    ++spins;
    if (!lookedNow()) return rcnWaitOk;
    const uint64_t now = globalTimerNs();
    if (start == 0) start = now;
    if (now - start > timeoutNs) return rcnWaitTimeout;
    if (*reinterpret_cast<const volatile uint32_t*>(failed) != 0) return rcnWaitAborted;
    if (readsHostNow(hostMask, onePerWarp) && *abortFlag != 0) return rcnWaitAborted;
    return rcnWaitOk;
  }

  // Whether the last check() read the clock (once every 64 spins).
  __device__ bool lookedNow() const { return (spins & 63u) == 0; }

  // Whether this thread reads host memory at this spin, as check() reads the
  // abort flag: every hostMask + 1 spins, and with onePerWarp only the
  // lowest lane still spinning in its warp.
  __device__ bool readsHostNow(uint32_t hostMask, bool onePerWarp) const {
    return (spins & hostMask) == 0 &&
           (!onePerWarp || (threadIdx.x & 31) == static_cast<unsigned>(__ffs(__activemask()) - 1));
  }
};

// The call after `last`. Call numbers tag units, flags and lines, and 0
// means "never written", so 0 is skipped on wrap-around (0xffffffff is
// followed by 2, keeping the phase call & 1 alternating).
__device__ inline uint32_t nextCallNumber(uint32_t last) {
  const uint32_t call = last + 1;
  return call == 0 ? 2 : call;
}

// Unit i of rank `from`'s part of phase `phase` in a window: 8 bytes, the
// value's bits low and the call number high, stored and loaded whole, so a
// unit holding this call's number holds this call's value.
__device__ inline uint64_t* unitOf(const rcnDeviceComm& dev, int owner, int phase, int from, size_t i) {
  return dev.window[owner] + (static_cast<size_t>(phase) * dev.nranks + from) * dev.maxValues + i;
}

__device__ inline void storeUnit(uint64_t* p, uint64_t v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ inline void loadUnitPair(const uint64_t* p, uint64_t* a, uint64_t* b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}

__device__ inline bool unitHas(uint64_t unit, uint32_t call) { return static_cast<uint32_t>(unit >> 32) == call; }

__device__ inline float unitValue(uint64_t unit) { return __uint_as_float(static_cast<uint32_t>(unit)); }

}  // namespace detail

// Programmatic dependent launch (a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization); both are no-ops for a
// plain launch. rcnDeviceWaitForPreviousKernels waits until the kernels
// before this one on the stream have finished and their writes are visible:
// call it before rcnDeviceCall. rcnDeviceLetNextKernelIn lets the next kernel
// on the stream be scheduled while this one ends; a kernel that gathers calls
// it only after its block's last gather (above).
__device__ inline void rcnDeviceWaitForPreviousKernels() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ inline void rcnDeviceLetNextKernelIn() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// This block's call number; 0 once a wait of the communicator failed (then
// rcnDevicePut does nothing and rcnDeviceGather4 returns false at once), and
// for a block past dev.maxBlocks, which fails the communicator (its peers
// would wait for it).
__device__ inline uint32_t rcnDeviceCall(const rcnDeviceComm& dev) {
  if (*reinterpret_cast<const volatile uint32_t*>(dev.failed) != 0) return 0;
  if (blockIdx.x >= static_cast<unsigned>(dev.maxBlocks)) {
    detail::recordFirstError(dev.failed, dev.error, rcnWaitBadUse, dev.rank, 0);
    return 0;
  }
  return detail::nextCallNumber(__ldcg(dev.calls + blockIdx.x));
}

// Puts v at index i (< dev.maxValues) of this rank's part of every rank's
// window. An index past it fails the communicator instead of writing into a
// neighbour's part.
__device__ inline void rcnDevicePut(const rcnDeviceComm& dev, uint32_t call, size_t i, float v) {
  if (call == 0) return;
  if (i >= dev.maxValues) {
    detail::recordFirstError(dev.failed, dev.error, rcnWaitBadUse, dev.rank, call);
    return;
  }
  const uint64_t unit = (static_cast<uint64_t>(call) << 32) | __float_as_uint(v);
  for (int k = 0; k < dev.nranks; ++k) {
    const int owner = (dev.rank + k) % dev.nranks;  // ranks start their stores at different peers
    detail::storeUnit(detail::unitOf(dev, owner, call & 1, dev.rank, i), unit);
  }
}

namespace detail {

// Whether index[0..valid) are groups a gather may read (each index even,
// index + 4 <= dev.maxValues); else the communicator fails.
template <int K>
__device__ inline bool groupsValid(const rcnDeviceComm& dev, uint32_t call, const size_t (&index)[K], int valid) {
#pragma unroll
  for (int k = 0; k < K; ++k) {  // an odd index would misalign the 16-byte loads
    // (index > maxValues - 4, not index + 4 > maxValues, which wraps for an index near SIZE_MAX)
    if (k < valid && (index[k] % 2 != 0 || dev.maxValues < 4 || index[k] > dev.maxValues - 4)) {
      recordFirstError(dev.failed, dev.error, rcnWaitBadUse, dev.rank, call);
      return false;
    }
  }
  return true;
}

// Loads rank r's units of groups index[0..valid) in this rank's window, all
// in flight together, and waits (bounded by `budget`) until each holds this
// call's number. False, the failure recorded, when the wait gave up.
template <int K>
__device__ inline bool waitForGroups(const rcnDeviceComm& dev, uint32_t call, int r, const size_t (&index)[K],
                                     int valid, WaitBudget& budget, uint64_t (&u)[K][4]) {
  const uint64_t* units[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k >= valid) break;
    units[k] = unitOf(dev, dev.rank, call & 1, r, index[k]);
    loadUnitPair(units[k], &u[k][0], &u[k][1]);
    loadUnitPair(units[k] + 2, &u[k][2], &u[k][3]);
  }
  for (;;) {
    bool ready = true;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k >= valid) break;
      if (unitHas(u[k][0], call) && unitHas(u[k][1], call) && unitHas(u[k][2], call) && unitHas(u[k][3], call))
        continue;
      ready = false;
      loadUnitPair(units[k], &u[k][0], &u[k][1]);
      loadUnitPair(units[k] + 2, &u[k][2], &u[k][3]);
    }
    if (ready) return true;
    const uint32_t why = budget.check(dev.timeoutNs, dev.failed, dev.abortFlag, 4095u, true);
    if (why != rcnWaitOk) {
      recordFirstError(dev.failed, dev.error, why, r, call);
      return false;
    }
  }
}

}  // namespace detail

// sum[k] = the sums of indices index[k] .. index[k] + 3 for k < valid (each
// index even, index + 4 <= dev.maxValues, else the communicator fails), every
// rank's values added in rank order. All K groups' loads from one rank are in
// flight together, so a thread waits one memory round trip per rank, not one
// per group: gather several groups per call (K = 4 is a good start). False
// when a wait failed (the error is recorded) or an earlier one had.
template <int K>
__device__ inline bool rcnDeviceGather4(const rcnDeviceComm& dev, uint32_t call, const size_t (&index)[K],
                                        float4 (&sum)[K], int valid = K) {
  if (call == 0 || !detail::groupsValid(dev, call, index, valid)) return false;
  float total[K][4];
  detail::WaitBudget budget;  // one bound for the whole gather, however many ranks are late
  for (int r = 0; r < dev.nranks; ++r) {
    uint64_t u[K][4];
    if (!detail::waitForGroups(dev, call, r, index, valid, budget, u)) return false;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k >= valid) break;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        total[k][e] = r == 0 ? detail::unitValue(u[k][e]) : total[k][e] + detail::unitValue(u[k][e]);
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (k < valid) sum[k] = make_float4(total[k][0], total[k][1], total[k][2], total[k][3]);
  return true;
}

// The all-gather's read: values[k] = the values rank `from` put at indices
// index[k] .. index[k] + 3 (its slice, as it put it: no sum), under the
// rules of rcnDeviceGather4. A rank puts its slice with rcnDevicePut at
// indices of its own part, so every rank's slice may start at index 0. The
// consumer must read from every rank at least once per call (as a sum
// gather does), since those waits keep a producer from overwriting what a
// slower peer still reads. False when a wait failed, or `from` is no rank
// (which fails the communicator).
template <int K>
__device__ inline bool rcnDeviceGatherFrom4(const rcnDeviceComm& dev, uint32_t call, int from, const size_t (&index)[K],
                                            float4 (&values)[K], int valid = K) {
  if (call == 0 || !detail::groupsValid(dev, call, index, valid)) return false;
  if (from < 0 || from >= dev.nranks) {
    detail::recordFirstError(dev.failed, dev.error, rcnWaitBadUse, dev.rank, call);
    return false;
  }
  detail::WaitBudget budget;
  uint64_t u[K][4];
  if (!detail::waitForGroups(dev, call, from, index, valid, budget, u)) return false;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (k < valid)
      values[k] = make_float4(detail::unitValue(u[k][0]), detail::unitValue(u[k][1]), detail::unitValue(u[k][2]),
                              detail::unitValue(u[k][3]));
  return true;
}

// Ends this block's part of the consumer kernel: advances every block slot
// it owns (slots b, b + grid, ...), so the next call's kernels, whatever
// their grids, read this call's number. Call after a barrier that follows
// the block's last gather.
__device__ inline void rcnDeviceEndCall(const rcnDeviceComm& dev, uint32_t call) {
  if (call == 0) return;
  for (int j = blockIdx.x + threadIdx.x * gridDim.x; j < dev.maxBlocks; j += blockDim.x * gridDim.x)
    dev.calls[j] = call;
}

}  // namespace rcn_device
