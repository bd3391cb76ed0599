// SPDX-License-Identifier: BSD-3-Clause
// The proxy path's kernel (see proxy_kernel.h for its protocols). Element
// types and ops (kernels/reduce_ops.cuh), the device helpers
// (kernels/device_common.cuh) and the launch (kernels/kernel_launch.cuh) are
// shared with the p2p kernel. One instance per (dtype, op); the protocol is
// a runtime argument.
#include "transport/proxy/proxy_kernel.h"

#include "kernels/device_common.cuh"
#include "kernels/kernel_launch.cuh"

namespace rcn {

namespace {

constexpr int kMaxThreads = 512;

// The device `failed` flag lives in ProxyState.
__device__ void recordError(const ProxyKernelArgs& a, uint32_t code, int peer, uint32_t call) {
  recordFirstError(&a.state->failed, a.error, code, peer, call);
}

// How often a waiting thread reads host memory beside its own poll (the
// abort flag, and a peer's mark below). Flags: only the threads
// 0..nranks-1 wait, so each reads it every time it looks at the clock (64
// spins). LL: every thread polls host memory, so one lane per warp reads it,
// every 4096 spins.
__device__ inline uint32_t hostMask(bool ll) { return ll ? 4095u : 63u; }

__device__ inline uint32_t waitCheck(WaitBudget& budget, const ProxyKernelArgs& a, bool ll) {
  return budget.check(a.timeoutNs, &a.state->failed, a.abortFlag, hostMask(ll), /*onePerWarp=*/ll);
}

__device__ inline char* slotOf(const ProxyKernelArgs& a, int phase, int from) {
  return a.region + a.layout.slotOffset(phase, from, a.nranks);
}

__device__ inline uint4* linesOf(const ProxyKernelArgs& a, int phase, int from) {
  return reinterpret_cast<uint4*>(a.region + a.layout.llSlotOffset(phase, from, a.nranks));
}

// Whether `peer` runs the other protocol in this very call, looked at where
// it would leave its mark. Waiting in LL: the peer's flag for block 0, which
// holds 0 unless the peer runs flags in this call (its reader clears it).
// Waiting for a flag: the peer's first line of this phase, whose call half
// is this call's only if the peer runs LL in it (stale lines carry older
// calls, and a peer cannot be two calls ahead). No healthy call sees either.
__device__ inline bool peerUsesOtherProtocol(const ProxyKernelArgs& a, int phase, int peer, uint32_t call,
                                             bool waitingInLL) {
  if (waitingInLL) return peerFlagRaised(a.region, a.layout, phase, peer, a.nranks, a.maxBlocks);
  if (a.layout.llSlotBytes == 0) return false;  // no LL lines: every call uses flags
  const uint4 line = loadLine(linesOf(a, phase, peer));
  const uint32_t want = proxyLineCall(call);
  return (line.y & kProxyLineCallMask) == want || (line.w & kProxyLineCallMask) == want;
}

// waitCheck, and the look above as often as the abort flag is read (both
// are host memory; in LL, looking every 64 spins made an 8 KB call 0.2-0.3
// us slower).
__device__ inline uint32_t waitCheckPeer(WaitBudget& budget, const ProxyKernelArgs& a, int phase, int peer,
                                         uint32_t call, bool waitingInLL) {
  const uint32_t why = waitCheck(budget, a, waitingInLL);
  // hostMask + 1 is a multiple of 64, so a spin that reads host memory also read the clock.
  if (why != kOneShotOk || !budget.readsHostNow(hostMask(waitingInLL), waitingInLL)) return why;
  return peerUsesOtherProtocol(a, phase, peer, call, waitingInLL) ? kOneShotMismatch : kOneShotOk;
}

// Thread 0 tells the proxy what this block covers (see ProxyDoorbell).
__device__ inline void ringDoorbell(const ProxyKernelArgs& a, int phase, uint32_t call,
                                    uint32_t protocol, size_t offset, size_t bytes) {
  uint4* bell = reinterpret_cast<uint4*>(a.doorbells + static_cast<size_t>(phase) * a.maxBlocks + blockIdx.x);
  storeLine(bell, make_uint4(gridDim.x, call, protocol, call));
  storeLine(bell + 1, make_uint4(static_cast<uint32_t>(offset), call, static_cast<uint32_t>(bytes), call));
  // Only flags carry the signature: LL's doorbell stays two stores.
  if (protocol == kProxyFlags)
    *reinterpret_cast<volatile uint64_t*>(bell + 2) = static_cast<uint64_t>(call) << 32 | a.signature;
}

// Threads 0..n-1 take their peer's flag of this block for this call (any
// other nonzero value is the peer's different call, proxy_kernel.h); 1 on
// the thread whose wait failed (it recorded why), else 0.
__device__ inline int takePeerFlag(const ProxyKernelArgs& a, int phase, uint32_t call) {
  const int peer = threadIdx.x;
  if (peer >= a.nranks || peer == a.rank) return 0;
  uint32_t* flag = reinterpret_cast<uint32_t*>(a.region + a.layout.flagsOffset) +
                   RegionLayout::flagIndex(phase, peer, blockIdx.x, a.nranks, a.maxBlocks);
  const auto giveUp = [&](WaitBudget& b) { return waitCheckPeer(b, a, phase, peer, call, /*waitingInLL=*/false); };
  const uint32_t why = takeFlag(flag, callTag(call, a.signature), /*othersMismatch=*/true, giveUp);
  if (why == kOneShotOk) return 0;
  recordError(a, why, peer, call);
  return 1;
}

// Whether a tag half seen in a line was written in this very call by a peer
// whose call differs: its call half is this call's, its signature half not.
__device__ inline bool otherCallsTag(uint32_t seen, uint32_t tag) {
  return seen != tag && ((seen ^ tag) & kProxyLineCallMask) == 0;
}

__device__ inline bool lineCarries(const uint4& line, uint32_t tag) { return line.y == tag && line.w == tag; }

// Polls two lines at once (second may be null) until both halves of each
// carry `tag`, so that a thread that owns two units waits one round trip,
// not two; any other tag of this call is kOneShotMismatch.
template <typename GiveUp>
__device__ inline uint32_t waitForLinePair(const uint4* first, const uint4* second, uint32_t tag,
                                           uint2* firstData, uint2* secondData, GiveUp giveUp) {
  const uint4 done = make_uint4(0, tag, 0, tag);
  uint4 a = loadLine(first), b = second ? loadLine(second) : done;
  WaitBudget budget;
  while (!lineCarries(a, tag) || !lineCarries(b, tag)) {
    if (otherCallsTag(a.y, tag) || otherCallsTag(a.w, tag) || otherCallsTag(b.y, tag) || otherCallsTag(b.w, tag))
      return kOneShotMismatch;
    const uint32_t why = giveUp(budget);
    if (why != kOneShotOk) return why;
    if (!lineCarries(a, tag)) a = loadLine(first);
    if (!lineCarries(b, tag)) b = loadLine(second);
  }
  *firstData = make_uint2(a.x, a.z);
  *secondData = make_uint2(b.x, b.z);
  return kOneShotOk;
}

// This block's share of `units` items (proxyBlockShare: the 32 KB LL call,
// cut at 683 lines a block before shares were whole cache lines, measured
// 13.3 us against 11.5 us for 48 KB).
__device__ inline ProxyBlockRange blockRange(size_t units) {
  return proxyBlockRange(units, gridDim.x, blockIdx.x);
}

// ---- what a call makes of the exchanged slices ----------------------------

// All-gather: rank r's chunk (elements first.. of its share) to its place.
template <typename T, typename V>
__device__ inline void gatherChunk(const ProxyKernelArgs& a, size_t first, int r, const V& v) {
  T* dst = static_cast<T*>(a.recv) + static_cast<size_t>(r) * a.count;
  storeChunk(dst, first, a.count, reinterpret_cast<uintptr_t>(dst) % sizeof(V) == 0, v);
}

// Reduce-scatter: the elements of the reduced chunk that fall in this
// rank's block, to recv. Element by element: a chunk may straddle the
// block's edge. In place (recv is the block inside send) each element goes
// back to the address its thread read it from.
template <typename T, typename V>
__device__ inline void scatterChunk(const ProxyKernelArgs& a, size_t first, const V& v) {
  constexpr int E = sizeof(V) / sizeof(T);
  if (first + E <= a.blockBegin || first >= a.blockEnd) return;
  T* dst = static_cast<T*>(a.recv);
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int j = 0; j < E; ++j)
    if (first + j >= a.blockBegin && first + j < a.blockEnd) dst[first + j - a.blockBegin] = e[j];
}

// The reduced chunk to recv: the whole of it (all-reduce) or this rank's block's part.
template <typename T, typename V>
__device__ inline void storeReduced(const ProxyKernelArgs& a, T* recv, size_t first, bool recvAligned, const V& v) {
  if (a.collective == kProxyReduceScatter) scatterChunk<T>(a, first, v);
  else storeChunk(recv, first, a.count, recvAligned, v);
}

// ---- protocol: separate flags ----------------------------------------------

template <typename T, typename Op>
__device__ bool runFlags(const ProxyKernelArgs& a, uint32_t call) {
  using Acc = typename ElemTraits<T>::Acc;
  constexpr int E = 16 / sizeof(T);
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const auto [send, recv, sendAligned, recvAligned] = callBuffers<T, 16>(a);
  const ProxyBlockRange range = blockRange((a.count * sizeof(T) + 15) / 16);

  // 1. Stage the slice into our own slot, where the proxy reads it.
  uint4* own = reinterpret_cast<uint4*>(slotOf(a, phase, me));
  for (size_t c = range.begin + threadIdx.x; c < range.end; c += blockDim.x)
    own[c] = loadChunk<T, uint4>(send, c * E, a.count, sendAligned);
  __syncthreads();

  // 2. Ring the doorbell after the slice: the barrier and the system fence
  // order the block's staging stores before it.
  if (threadIdx.x == 0) {
    __threadfence_system();
    ringDoorbell(a, phase, call, kProxyFlags, range.begin * 16, (range.end - range.begin) * 16);
  }

  // 3. Take every peer's flag for this block.
  if (__syncthreads_or(takePeerFlag(a, phase, call))) return false;

  // 4. Reduce in rank order (our own contribution straight from the input),
  //    or, for an all-gather, copy every rank's chunk to its place.
  for (size_t c = range.begin + threadIdx.x; c < range.end; c += blockDim.x) {
    Acc acc[E];
    for (int r = 0; r < n; ++r) {
      const uint4 v = r == me ? loadChunk<T, uint4>(send, c * E, a.count, sendAligned)
                              : __ldcv(reinterpret_cast<const uint4*>(slotOf(a, phase, r)) + c);
      if (a.collective == kProxyAllGather) gatherChunk<T>(a, c * E, r, v);
      else accumulate<T, Op>(acc, v, r == 0);
    }
    if (a.collective != kProxyAllGather) storeReduced(a, recv, c * E, recvAligned, finishChunk<T, Op, uint4>(acc, n));
  }
  return true;
}

// ---- protocol: low latency (tags inside the data) ---------------------------

template <typename T, typename Op>
__device__ bool runLL(const ProxyKernelArgs& a, uint32_t call, bool staged) {
  using Acc = typename ElemTraits<T>::Acc;
  constexpr int E = 8 / sizeof(T);
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const auto [send, recv, sendAligned, recvAligned] = callBuffers<T, 8>(a);
  const ProxyBlockRange range = blockRange((a.count * sizeof(T) + 7) / 8);
  const size_t lineOffset = range.begin * 16, lineBytes = (range.end - range.begin) * 16;
  const uint32_t tag = proxyLineTag(call, a.signature);

  // 1. Ring first: the proxy starts on the lines as they land, and needs no
  // fence because each line vouches for itself.
  if (!staged && threadIdx.x == 0) ringDoorbell(a, phase, call, kProxyLL, lineOffset, lineBytes);

  // 2. Each 8-byte unit, tagged twice, into our own lines.
  uint4* own = linesOf(a, phase, me);
  for (size_t u = range.begin + threadIdx.x; u < range.end; u += blockDim.x) {
    const uint2 d = loadChunk<T, uint2>(send, u * E, a.count, sendAligned);
    storeLine(own + u, make_uint4(d.x, tag, d.y, tag));
  }
  // Staged: the NIC reads the lines once the doorbell rang, so every line
  // must be visible to it (beyond the GPU) by then.
  if (staged) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      ringDoorbell(a, phase, call, kProxyLLStaged, lineOffset, lineBytes);
    }
  }

  // 3. Poll each peer's lines until they carry this call's tag; reduce in
  // rank order. A thread takes its units two at a time (u and u + blockDim),
  // so both polls cross PCIe together. Stale lines carry an older call, so
  // they need no clearing.
  int failed = 0;
  for (size_t u = range.begin + threadIdx.x; u < range.end; u += 2 * blockDim.x) {
    const size_t u2 = u + blockDim.x;
    const bool two = u2 < range.end;
    Acc acc[E], acc2[E];
    for (int r = 0; r < n; ++r) {
      uint2 d, d2 = make_uint2(0, 0);
      if (r == me) {
        d = loadChunk<T, uint2>(send, u * E, a.count, sendAligned);
        if (two) d2 = loadChunk<T, uint2>(send, u2 * E, a.count, sendAligned);
      } else {
        const uint4* lines = linesOf(a, phase, r);
        const uint32_t why = waitForLinePair(lines + u, two ? lines + u2 : nullptr, tag, &d, &d2,
                                             [&](WaitBudget& b) {
                                               return waitCheckPeer(b, a, phase, r, call, /*waitingInLL=*/true);
                                             });
        if (why != kOneShotOk) {
          recordError(a, why, r, call);
          failed = 1;
          break;
        }
      }
      if (a.collective == kProxyAllGather) {
        gatherChunk<T>(a, u * E, r, d);
        if (two) gatherChunk<T>(a, u2 * E, r, d2);
        continue;
      }
      accumulate<T, Op>(acc, d, r == 0);
      accumulate<T, Op>(acc2, d2, r == 0);
    }
    if (failed) break;
    if (a.collective == kProxyAllGather) continue;
    storeReduced(a, recv, u * E, recvAligned, finishChunk<T, Op, uint2>(acc, n));
    if (two) storeReduced(a, recv, u2 * E, recvAligned, finishChunk<T, Op, uint2>(acc2, n));
  }
  return !__syncthreads_or(failed);
}

// Run by the whole last block of a call, after every block read its peers'
// lines. Safe to zero then: peers' lines of this call's phase (a peer writes
// them next in call + 2, which needs this rank's data of call + 1, sent only
// after this kernel ends), and this rank's own lines of the previous call's
// phase (its proxy forwarded them before any peer could finish that call,
// and this rank writes them next in call + 1). Calls 0 and 1 modulo
// scrubCalls cover both phases of peers' lines, calls 1 and 2 both of ours.
__device__ inline bool scrubsLines(const ProxyKernelArgs& a, uint32_t call) {
  return a.layout.llSlotBytes != 0 && (call & (a.scrubCalls - 1)) <= 2;
}

__device__ void scrubLines(const ProxyKernelArgs& a, uint32_t call) {
  const uint32_t step = call & (a.scrubCalls - 1);
  const size_t lines = a.layout.llSlotBytes / 16;
  for (int r = 0; r < a.nranks; ++r) {
    const bool own = r == a.rank;
    if (own ? step == 0 : step == 2) continue;
    uint4* line = linesOf(a, own ? (call - 1) & 1 : call & 1, r);
    for (size_t i = threadIdx.x; i < lines; i += blockDim.x) line[i] = make_uint4(0, 0, 0, 0);
  }
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kMaxThreads) proxyKernel(const ProxyKernelArgs a, int protocol) {
  rcnDeviceWaitForPreviousKernels();
  volatile ProxyState* st = a.state;
  if (st->failed) return;  // an earlier call lost a peer: never wait again
  const uint32_t call = nextCallNumber(st->epoch);
  const bool ok = protocol == kProxyFlags ? runFlags<T, Op>(a, call)
                                          : runLL<T, Op>(a, call, protocol == kProxyLLStaged);
  if (!ok) return;
  rcnDeviceLetNextKernelIn();

  // The last block to finish advances the epoch for the next call; on the
  // calls that scrub lines, its whole block scrubs first (the other calls
  // keep the single-thread tail).
  __shared__ bool lastBlock;
  const bool scrub = scrubsLines(a, call);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    lastBlock = atomicAdd(&a.state->done, 1u) == gridDim.x - 1;
  }
  if (scrub) {
    __syncthreads();
    if (lastBlock) scrubLines(a, call);
    __syncthreads();
  }
  if (threadIdx.x == 0 && lastBlock) {
    st->done = 0;
    st->epoch = call;
    __threadfence();
  }
}

using KernelFn = void (*)(const ProxyKernelArgs, int);

const KernelFn kKernels[rcnNumTypes][rcnNumOps] = RCN_KERNEL_TABLE(proxyKernel);

}  // namespace

rcnResult_t preloadProxyKernels() { return preloadKernels(kKernels); }

rcnResult_t launchProxyKernel(const ProxyKernelArgs& args, rcnDataType_t dtype, rcnRedOp_t op,
                              const OneShotGrid& grid, bool staged, bool programmaticLaunch,
                              cudaStream_t stream) {
  const int protocol = grid.protocol != OneShotProtocol::LL ? kProxyFlags : staged ? kProxyLLStaged : kProxyLL;
  return launchKernel(kKernels[dtype][op], grid, programmaticLaunch, stream, args, protocol);
}

}  // namespace rcn
