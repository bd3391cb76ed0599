// SPDX-License-Identifier: BSD-3-Clause
// The one-shot all-reduce kernel (see one_shot.h for the two protocols).
// One template instance per (dtype, op): 12 x 5 = 60; the protocol is a
// runtime argument so it adds no instances.
#include "kernels/one_shot.h"

#include <algorithm>

#include "core/mix64.h"
#include "kernels/device_common.cuh"
#include "kernels/kernel_launch.cuh"
#include "kernels/one_shot_call.cuh"

namespace rcn {

namespace {

// Threads per block are capped at 512 so that every instance gets 128 registers.
constexpr int kMaxThreads = 512;

size_t roundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

// ---- protocol: separate flags ----------------------------------------------

template <typename T, typename Op>
__device__ void runFlags(const OneShotArgs& a, uint32_t call) {
  using Acc = typename ElemTraits<T>::Acc;
  constexpr int E = 16 / sizeof(T);
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const uint32_t tag = callTag(call, a.signature);
  const auto [send, recv, sendAligned, recvAligned] = callBuffers<T, 16>(a);

  // This block's slice, in 16-byte chunks; the same on every rank.
  const size_t chunks = (a.count * sizeof(T) + 15) / 16;
  const size_t perBlock = (chunks + gridDim.x - 1) / gridDim.x;
  const size_t begin = blockIdx.x * perBlock;
  const size_t end = begin + perBlock < chunks ? begin + perBlock : chunks;

  // 1. The slice into slot[phase][me] of every rank, this one included.
  for (size_t c = begin + threadIdx.x; c < end; c += blockDim.x) {
    const uint4 v = loadChunk<T, uint4>(send, c * E, a.count, sendAligned);
    for (int i = 0; i < n; ++i) {
      const int p = (me + i) % n;
      reinterpret_cast<uint4*>(slotOf(a, p, phase, me))[c] = v;
    }
  }
  __syncthreads();

  // 2. Raise flag[phase][me][block] on every peer, after the data: the
  // barrier orders the block's stores before this thread's release.
  const int peer = threadIdx.x;
  if (peer < n && peer != me) storeReleaseSys(flagOf(a, peer, phase, me), tag);

  // 3. Take every peer's flag for this block.
  int failed = 0;
  if (peer < n && peer != me) {
    const auto giveUp = [&](WaitBudget& b) { return waitCheckPeer(b, a, phase, peer, /*waitingInLL=*/false); };
    const uint32_t why = takeFlag(flagOf(a, me, phase, peer), tag, /*othersMismatch=*/true, giveUp);
    if (why != kOneShotOk) {
      recordError(a, why, peer, call);
      failed = 1;
    }
  }
  if (__syncthreads_or(failed)) return;
  rcnDeviceLetNextKernelIn();  // this block waits no more

  // 4. Reduce slot[phase][0..n-1] in rank order: identical on every rank.
  for (size_t c = begin + threadIdx.x; c < end; c += blockDim.x) {
    Acc acc[E];
    for (int r = 0; r < n; ++r) {
      const uint4 v = __ldcg(reinterpret_cast<const uint4*>(slotOf(a, me, phase, r)) + c);
      accumulate<T, Op>(acc, v, r == 0);
    }
    storeChunk(recv, c * E, a.count, recvAligned, finishChunk<T, Op, uint4>(acc, n));
  }
  finishCall(a, call);
}

// ---- protocol: low latency (flags inside the data) -------------------------

template <typename T, typename Op>
__device__ void runLL(const OneShotArgs& a, uint32_t call) {
  using Acc = typename ElemTraits<T>::Acc;
  constexpr int E = 8 / sizeof(T);
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const uint32_t tag = callTag(call, a.signature);
  const auto [send, recv, sendAligned, recvAligned] = callBuffers<T, 8>(a);

  // Thread t of the grid owns 8-byte units t, t + stride, ...
  const size_t units = (a.count * sizeof(T) + 7) / 8;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  // 1. Each unit, tagged twice, into every peer's lines.
  uint2 firstUnit = make_uint2(0, 0);  // kept for step 2: most threads own one unit
  for (size_t u = first; u < units; u += stride) {
    const uint2 d = loadChunk<T, uint2>(send, u * E, a.count, sendAligned);
    if (u == first) firstUnit = d;
    const uint4 line = make_uint4(d.x, tag, d.y, tag);
    for (int i = 1; i < n; ++i) storeLine(linesOf(a, (me + i) % n, phase, me) + u, line);
  }

  // 2. Poll each peer's line until it carries this call's tag; reduce in rank order.
  int failed = 0;
  for (size_t u = first; u < units; u += stride) {
    Acc acc[E];
    for (int r = 0; r < n; ++r) {
      uint2 d;
      if (r == me) {
        d = u == first ? firstUnit : loadChunk<T, uint2>(send, u * E, a.count, sendAligned);
      } else {
        const uint4* src = linesOf(a, me, phase, r) + u;
        const uint32_t why =
            waitForLine(src, tag, &d, [&](WaitBudget& b) { return waitCheckPeer(b, a, phase, r, /*waitingInLL=*/true); });
        if (why != kOneShotOk) {
          recordError(a, why, r, call);
          failed = 1;
          break;
        }
        // Clear the tags once read, so a line only ever holds 0 or the current call.
        storeLine(const_cast<uint4*>(src), make_uint4(0, 0, 0, 0));
      }
      accumulate<T, Op>(acc, d, r == 0);
    }
    if (failed) break;
    storeChunk(recv, u * E, a.count, recvAligned, finishChunk<T, Op, uint2>(acc, n));
  }
  if (__syncthreads_or(failed)) return;
  rcnDeviceLetNextKernelIn();
  finishCall(a, call);
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kMaxThreads) oneShotKernel(const OneShotArgs a, int ll) {
  rcnDeviceWaitForPreviousKernels();
  const uint32_t call = callNumber(a);
  if (call == 0) return;  // an earlier call lost a peer: do nothing, never wait again
  if (ll)
    runLL<T, Op>(a, call);
  else
    runFlags<T, Op>(a, call);
}

using KernelFn = void (*)(const OneShotArgs, int);

const KernelFn kKernels[rcnNumTypes][rcnNumOps] = RCN_KERNEL_TABLE(oneShotKernel);

}  // namespace

RegionLayout regionLayout(int nranks, size_t maxBytes, int maxBlocks, size_t llMaxBytes,
                          bool keepSlots, size_t windowValues) {
  RegionLayout L{};
  const size_t perPhase = static_cast<size_t>(2) * nranks;  // [2 phases][nranks]
  L.flagsOffset = 0;
  // Separate-flag slots only exist for messages the LL protocol does not take (or when asked).
  L.slotBytes = keepSlots || maxBytes > llMaxBytes ? roundUp(maxBytes, 16) : 0;
  L.slotsOffset = roundUp(perPhase * maxBlocks * sizeof(uint32_t), 256);
  L.llSlotBytes = roundUp(2 * llMaxBytes, 64);  // slots never share a cache line
  L.llOffset = roundUp(L.slotsOffset + perPhase * L.slotBytes, 256);
  L.windowOffset = roundUp(L.llOffset + perPhase * L.llSlotBytes, 256);
  L.windowValues = roundUp(windowValues, 2);  // gathers read units in pairs
  L.totalBytes = roundUp(L.windowOffset + perPhase * L.windowValues * sizeof(uint64_t), 256);
  return L;
}

uint32_t callSignature(size_t count, rcnDataType_t dtype, rcnRedOp_t op, int collective) {
  const uint64_t x = static_cast<uint64_t>(count) ^ (static_cast<uint64_t>(dtype) << 52) ^
                     (static_cast<uint64_t>(op) << 58) ^ (static_cast<uint64_t>(collective) << 61);
  return static_cast<uint32_t>(mix64(x)) & 0x7fffffffu;
}

OneShotGrid oneShotGrid(size_t bytes, size_t llMaxBytes, int maxBlocks, int threads) {
  OneShotGrid g{};
  g.protocol = bytes <= llMaxBytes ? OneShotProtocol::LL : OneShotProtocol::Flags;
  // One unit per thread where possible: 8 bytes per LL line, 16 per flags chunk.
  const size_t units = (bytes + (g.protocol == OneShotProtocol::LL ? 7 : 15)) /
                       (g.protocol == OneShotProtocol::LL ? 8 : 16);
  const size_t maxThreads = static_cast<size_t>(std::min(threads, kMaxThreads));
  g.threads = static_cast<int>(std::min(maxThreads, std::max<size_t>(32, roundUp(units, 32))));
  const size_t blocks = (units + g.threads - 1) / g.threads;
  g.blocks = static_cast<int>(std::max<size_t>(1, std::min<size_t>(blocks, maxBlocks)));
  return g;
}

rcnResult_t preloadOneShotKernels() { return preloadKernels(kKernels); }

rcnResult_t launchOneShot(const OneShotArgs& args, rcnDataType_t dtype, rcnRedOp_t op,
                          const OneShotGrid& grid, const OneShotLaunchOptions& options,
                          cudaStream_t stream) {
  const int ll = grid.protocol == OneShotProtocol::LL ? 1 : 0;
  return launchKernel(kKernels[dtype][op], grid, options.programmaticLaunch, stream, args, ll);
}

}  // namespace rcn
