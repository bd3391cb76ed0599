// SPDX-License-Identifier: BSD-3-Clause
// Device helpers shared by the all-reduce kernels (kernels/one_shot.cu and
// transport/proxy/proxy_kernel.cu): system-scope flag access, the PDL
// prologue, call numbering, bounded waits and the 16- or 8-byte chunk moves
// with their element-wise reduction. Every helper is small and inlined, so
// a kernel compiles to the same code as if it spelled them out.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/one_shot.h"
#include "kernels/reduce_ops.cuh"
#include "rocenante/device.cuh"

namespace rcn {

// Internal linkage in each kernel file, as when each file spelled these out
// (the helpers taken from rocenante/device.cuh are inline there).
namespace {

// ---- PTX helpers -----------------------------------------------------------

__device__ inline void storeReleaseSys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ inline uint32_t loadAcquireSys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// LL lines: one 16-byte access; each 8-byte half (data word + tag word) is
// written and read whole, so a tag equal to the call vouches for its word.
__device__ inline void storeLine(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ inline uint4 loadLine(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// PDL, the device API's helpers. Every kernel waits for the previous ones
// before it touches memory. A kernel that waits for peers lets the next one
// in only once its block waits no more: a next kernel scheduled earlier
// holds SM room while it waits, lets its own next one in, and so on down the
// stream, until a peer's kernel that shares the GPU finds no room and every
// rank waits for ever (docs/design.md, "When the next kernel is let in").
using rcn_device::rcnDeviceLetNextKernelIn;
using rcn_device::rcnDeviceWaitForPreviousKernels;

// ---- call numbers ----------------------------------------------------------

// The call after `last` (0 is skipped on wrap-around): the device API's rule.
using rcn_device::detail::nextCallNumber;

// ---- bounded waits ---------------------------------------------------------

// The bounded wait's budget and the first-error record are the device
// API's (rocenante/device.cuh); each kernel passes its own timeout, `failed`
// flag, abort flag and error record.
using rcn_device::detail::recordFirstError;
using rcn_device::detail::WaitBudget;
// ---- waiting for a peer ----------------------------------------------------

// giveUp(budget) is the kernel's own WaitBudget::check call (each kernel
// keeps its `failed` flag elsewhere and reads the host abort flag at its own
// rate); both waits return kOneShotOk or the reason it gave.

// Spins until *flag holds `expected` (acquire, system scope). Where the
// flag holds only 0 or this call's value (othersMismatch: the p2p kernel's
// tags), any other value is a peer's different call: kOneShotMismatch.
template <typename GiveUp>
__device__ inline uint32_t waitForFlag(const uint32_t* flag, uint32_t expected, bool othersMismatch, GiveUp giveUp) {
  WaitBudget budget;
  for (uint32_t v = loadAcquireSys(flag); v != expected; v = loadAcquireSys(flag)) {
    if (othersMismatch && v != 0) return kOneShotMismatch;
    const uint32_t why = giveUp(budget);
    if (why != kOneShotOk) return why;
  }
  return kOneShotOk;
}

// Whether `peer`'s flag for block 0 of `phase` is raised in the exchange
// region at `region`: 0 unless the peer runs the flags protocol in this very
// call (a reader clears what it took). A wait in LL looks here for a peer
// whose call went the other protocol (both kernels).
__device__ inline bool peerFlagRaised(const char* region, const RegionLayout& layout, int phase, int peer,
                                      int nranks, int maxBlocks) {
  const uint32_t* flag = reinterpret_cast<const uint32_t*>(region + layout.flagsOffset) +
                         RegionLayout::flagIndex(phase, peer, 0, nranks, maxBlocks);
  return *reinterpret_cast<const volatile uint32_t*>(flag) != 0;
}

// Waits for *flag to hold `expected`, then clears it: a flag is either 0 or
// the current call's, so a stale value never matches. The caller records a failure.
template <typename GiveUp>
__device__ inline uint32_t takeFlag(uint32_t* flag, uint32_t expected, bool othersMismatch, GiveUp giveUp) {
  const uint32_t why = waitForFlag(flag, expected, othersMismatch, giveUp);
  if (why == kOneShotOk) *reinterpret_cast<volatile uint32_t*>(flag) = 0;
  return why;
}

// Polls an LL line until both its halves carry `tag`; *data gets its two
// data words. A line holds 0 or this call's tag in each half (its reader
// clears it), so any other tag is a peer's different call: kOneShotMismatch.
template <typename GiveUp>
__device__ inline uint32_t waitForLine(const uint4* line, uint32_t tag, uint2* data, GiveUp giveUp) {
  uint4 v = loadLine(line);
  WaitBudget budget;
  while (v.y != tag || v.w != tag) {
    if ((v.y != 0 && v.y != tag) || (v.w != 0 && v.w != tag)) return kOneShotMismatch;
    const uint32_t why = giveUp(budget);
    if (why != kOneShotOk) return why;
    v = loadLine(line);
  }
  *data = make_uint2(v.x, v.z);
  return kOneShotOk;
}

// ---- chunk loads and stores ------------------------------------------------

// A call's buffers, typed, and whether whole VecBytes vectors can be moved at
// them (unaligned pointers go element by element). Read with a structured
// binding: auto [send, recv, sendAligned, recvAligned] = callBuffers<T, 16>(a).
template <typename T>
struct CallBuffers {
  const T* send;
  T* recv;
  bool sendAligned;
  bool recvAligned;
};

template <typename T, int VecBytes>
__device__ inline CallBuffers<T> callBuffers(const AllReduceCallArgs& a) {
  const T* send = static_cast<const T*>(a.send);
  T* recv = static_cast<T*>(a.recv);
  return {send, recv, reinterpret_cast<uintptr_t>(send) % VecBytes == 0,
          reinterpret_cast<uintptr_t>(recv) % VecBytes == 0};
}

// Loads the E = sizeof(V)/sizeof(T) elements starting at element `first`;
// elements at or past `count` read as zero bits. Whole-vector access when the
// pointer allows it, element by element otherwise (unaligned pointers, tails).
template <typename T, typename V>
__device__ inline V loadChunk(const T* src, size_t first, size_t count, bool aligned) {
  constexpr int E = sizeof(V) / sizeof(T);
  if (aligned && first + E <= count) return *reinterpret_cast<const V*>(src + first);
  V v{};
  T* e = reinterpret_cast<T*>(&v);
#pragma unroll
  for (int j = 0; j < E; ++j)
    if (first + j < count) e[j] = src[first + j];
  return v;
}

template <typename T, typename V>
__device__ inline void storeChunk(T* dst, size_t first, size_t count, bool aligned, const V& v) {
  constexpr int E = sizeof(V) / sizeof(T);
  if (aligned && first + E <= count) {
    *reinterpret_cast<V*>(dst + first) = v;
    return;
  }
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int j = 0; j < E; ++j)
    if (first + j < count) dst[first + j] = e[j];
}

// acc = v (first rank) or acc = op(acc, v), element-wise.
template <typename T, typename Op, typename V, typename Acc, int E>
__device__ inline void accumulate(Acc (&acc)[E], const V& v, bool first) {
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int j = 0; j < E; ++j) {
    const Acc x = ElemTraits<T>::toAcc(e[j]);
    acc[j] = first ? x : Op::combine(acc[j], x);
  }
}

// The finished accumulators, converted back to T and packed into one V.
template <typename T, typename Op, typename V, typename Acc, int E>
__device__ inline V finishChunk(const Acc (&acc)[E], int nranks) {
  V out{};
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int j = 0; j < E; ++j) o[j] = ElemTraits<T>::fromAcc(Op::finish(acc[j], nranks));
  return out;
}

}  // namespace

}  // namespace rcn
