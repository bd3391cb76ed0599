// SPDX-License-Identifier: BSD-3-Clause
// The one-shot all-gather and reduce-scatter kernels (one_shot_collectives.h).
// Both are the all-reduce's LL protocol with other sources and targets: unit
// u (8 bytes) of a share travels as one 16-byte line {lo, tag, hi, tag} into
// line[phase][me] of the peer that needs it; the reader polls its own lines
// until both tags are the call's, then clears them. The all-gather copies
// each peer's units to that peer's place in recv; the reduce-scatter reduces
// them, with this rank's own block, in rank order (bit-identical to the
// all-reduce's result for that block).
#include "kernels/one_shot_collectives.h"

#include "kernels/device_common.cuh"
#include "kernels/kernel_launch.cuh"
#include "kernels/one_shot_call.cuh"

namespace rcn {

namespace {

constexpr int kMaxThreads = 512;  // as the all-reduce kernel's

// Waits for peer r's unit u of this call and clears its line; kOneShotOk or
// the reason (recorded by the caller).
__device__ inline uint32_t takeUnit(const OneShotArgs& a, int phase, int r, size_t u, uint32_t tag, uint2* d) {
  const uint4* src = linesOf(a, a.rank, phase, r) + u;
  const uint32_t why = waitForLine(src, tag, d, [&](WaitBudget& b) { return waitCheckPeer(b, a, phase, r, true); });
  if (why == kOneShotOk) storeLine(const_cast<uint4*>(src), make_uint4(0, 0, 0, 0));
  return why;
}

// a.count bytes from every rank land at recv + rank * a.count.
__global__ void __launch_bounds__(kMaxThreads) allGatherKernel(const OneShotArgs a) {
  rcnDeviceWaitForPreviousKernels();
  const uint32_t call = callNumber(a);
  if (call == 0) return;  // an earlier call lost a peer: do nothing, never wait again
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const uint32_t tag = callTag(call, a.signature);
  const size_t share = a.count;
  const uint8_t* send = static_cast<const uint8_t*>(a.send);
  uint8_t* recv = static_cast<uint8_t*>(a.recv);
  const bool sendAligned = reinterpret_cast<uintptr_t>(send) % 8 == 0;
  const size_t units = (share + 7) / 8;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  // 1. Each unit of this rank's share, tagged, to every peer; and to its own
  //    place (in place, the same bytes onto themselves).
  uint8_t* mine = recv + static_cast<size_t>(me) * share;
  for (size_t u = first; u < units; u += stride) {
    const uint2 d = loadChunk<uint8_t, uint2>(send, u * 8, share, sendAligned);
    const uint4 line = make_uint4(d.x, tag, d.y, tag);
    for (int i = 1; i < n; ++i) storeLine(linesOf(a, (me + i) % n, phase, me) + u, line);
    storeChunk(mine, u * 8, share, reinterpret_cast<uintptr_t>(mine) % 8 == 0, d);
  }

  // 2. Every peer's units to their place.
  int failed = 0;
  for (size_t u = first; u < units && !failed; u += stride)
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      uint2 d;
      const uint32_t why = takeUnit(a, phase, r, u, tag, &d);
      if (why != kOneShotOk) {
        recordError(a, why, r, call);
        failed = 1;
        break;
      }
      uint8_t* theirs = recv + static_cast<size_t>(r) * share;
      storeChunk(theirs, u * 8, share, reinterpret_cast<uintptr_t>(theirs) % 8 == 0, d);
    }
  if (__syncthreads_or(failed)) return;
  rcnDeviceLetNextKernelIn();
  finishCall(a, call);
}

// Block p (a.count elements) of send goes to rank p; recv gets block `rank`
// reduced over every rank in rank order.
template <typename T, typename Op>
__global__ void __launch_bounds__(kMaxThreads) reduceScatterKernel(const OneShotArgs a) {
  using Acc = typename ElemTraits<T>::Acc;
  constexpr int E = 8 / sizeof(T);
  rcnDeviceWaitForPreviousKernels();
  const uint32_t call = callNumber(a);
  if (call == 0) return;
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const uint32_t tag = callTag(call, a.signature);
  const T* send = static_cast<const T*>(a.send);
  T* recv = static_cast<T*>(a.recv);
  const size_t count = a.count;
  const size_t units = (count * sizeof(T) + 7) / 8;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto blockOf = [&](int p) { return send + static_cast<size_t>(p) * count; };
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; };

  // 1. Each peer's block, unit by unit, into that peer's lines.
  for (size_t u = first; u < units; u += stride)
    for (int i = 1; i < n; ++i) {
      const int p = (me + i) % n;
      const uint2 d = loadChunk<T, uint2>(blockOf(p), u * E, count, aligned(blockOf(p)));
      storeLine(linesOf(a, p, phase, me) + u, make_uint4(d.x, tag, d.y, tag));
    }

  // 2. Every rank's unit of this rank's block, reduced in rank order. In
  //    place (recv is this rank's block) each thread reads its unit first.
  int failed = 0;
  for (size_t u = first; u < units && !failed; u += stride) {
    Acc acc[E];
    for (int r = 0; r < n; ++r) {
      uint2 d;
      if (r == me) {
        d = loadChunk<T, uint2>(blockOf(me), u * E, count, aligned(blockOf(me)));
      } else {
        const uint32_t why = takeUnit(a, phase, r, u, tag, &d);
        if (why != kOneShotOk) {
          recordError(a, why, r, call);
          failed = 1;
          break;
        }
      }
      accumulate<T, Op>(acc, d, r == 0);
    }
    if (failed) break;
    storeChunk(recv, u * E, count, aligned(recv), finishChunk<T, Op, uint2>(acc, n));
  }
  if (__syncthreads_or(failed)) return;
  rcnDeviceLetNextKernelIn();
  finishCall(a, call);
}

using ReduceScatterFn = void (*)(const OneShotArgs);
const ReduceScatterFn kReduceScatterKernels[rcnNumTypes][rcnNumOps] = RCN_KERNEL_TABLE(reduceScatterKernel);

}  // namespace

rcnResult_t launchAllGather(const OneShotArgs& args, const OneShotGrid& grid, const OneShotLaunchOptions& options,
                            cudaStream_t stream) {
  return launchKernel(allGatherKernel, grid, options.programmaticLaunch, stream, args);
}

rcnResult_t launchReduceScatter(const OneShotArgs& args, rcnDataType_t dtype, rcnRedOp_t op, const OneShotGrid& grid,
                                const OneShotLaunchOptions& options, cudaStream_t stream) {
  return launchKernel(kReduceScatterKernels[dtype][op], grid, options.programmaticLaunch, stream, args);
}

rcnResult_t preloadCollectiveKernels() {
  cudaFuncAttributes attributes;
  RCN_CUDA_CHECK(cudaFuncGetAttributes(&attributes, allGatherKernel));
  return preloadKernels(kReduceScatterKernels);
}

}  // namespace rcn
