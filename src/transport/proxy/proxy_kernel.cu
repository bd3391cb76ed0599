// The proxy path's kernel (see proxy_kernel.h). Element types and ops
// (kernels/reduce_ops.cuh), the device helpers (kernels/device_common.cuh)
// and the launch (kernels/kernel_launch.cuh) are shared with the p2p kernel.
// One instance per (dtype, op).
#include "transport/proxy/proxy_kernel.h"

#include "kernels/device_common.cuh"
#include "kernels/kernel_launch.cuh"

namespace rcn {

namespace {

constexpr int kMaxThreads = 512;

// The device `failed` flag lives in ProxyState.
__device__ void recordError(const ProxyKernelArgs& a, uint32_t code, int peer, uint32_t call) {
  recordFirstError(a, &a.state->failed, code, peer, call);
}

// Only the threads 0..nranks-1 wait, so each reads the host-mapped abort
// flag every time it looks at the clock (64 spins).
__device__ inline uint32_t waitCheck(WaitBudget& budget, const ProxyKernelArgs& a) {
  return budget.check(a, &a.state->failed, 63u, /*onePerWarp=*/false);
}

template <typename T>
__device__ inline char* slotOf(const ProxyKernelArgs& a, int phase, int from) {
  return a.region + a.layout.slotsOffset +
         (static_cast<size_t>(phase) * a.nranks + from) * a.layout.slotBytes;
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kMaxThreads) proxyKernel(const ProxyKernelArgs a) {
  using Acc = typename ElemTraits<T>::Acc;
  constexpr int E = 16 / sizeof(T);
  waitForPreviousKernels();
  volatile ProxyState* st = a.state;
  if (st->failed) return;  // an earlier call lost a peer: never wait again
  const uint32_t call = nextCallNumber(st->epoch);
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const T* send = static_cast<const T*>(a.send);
  T* recv = static_cast<T*>(a.recv);
  const bool sendAligned = (reinterpret_cast<uintptr_t>(send) & 15) == 0;
  const bool recvAligned = (reinterpret_cast<uintptr_t>(recv) & 15) == 0;

  // This block's slice in 16-byte chunks; the same on every rank.
  const size_t chunks = (a.count * sizeof(T) + 15) / 16;
  const size_t perBlock = (chunks + gridDim.x - 1) / gridDim.x;
  const size_t begin = min(chunks, blockIdx.x * perBlock);
  const size_t end = min(chunks, begin + perBlock);

  // 1. Stage the slice into our own slot, where the proxy reads it.
  uint4* own = reinterpret_cast<uint4*>(slotOf<T>(a, phase, me));
  for (size_t c = begin + threadIdx.x; c < end; c += blockDim.x)
    own[c] = loadChunk<T, uint4>(send, c * E, a.count, sendAligned);
  __syncthreads();

  // 2. Ring this block's doorbell: the slice first, the call number last.
  // The barrier above orders the block's staging stores before this
  // thread's system-scope release, which the proxy acquires.
  if (threadIdx.x == 0) {
    volatile ProxyDoorbell* d = a.doorbells + static_cast<size_t>(phase) * a.maxBlocks + blockIdx.x;
    d->blocks = gridDim.x;
    d->offset = static_cast<uint32_t>(begin * 16);
    d->bytes = static_cast<uint32_t>((end - begin) * 16);
    storeReleaseSys(const_cast<uint32_t*>(&d->call), call);
  }

  // 3. Wait for every peer's flag for this block, then clear it (a flag is
  // either 0 or the current call, so a stale value never matches).
  int failed = 0;
  const int peer = threadIdx.x;
  if (peer < n && peer != me) {
    uint32_t* flag = reinterpret_cast<uint32_t*>(a.region + a.layout.flagsOffset) +
                     (static_cast<size_t>(phase) * n + peer) * a.maxBlocks + blockIdx.x;
    WaitBudget budget;
    while (loadAcquireSys(flag) != call) {
      const uint32_t why = waitCheck(budget, a);
      if (why != kOneShotOk) {
        recordError(a, why, peer, call);
        failed = 1;
        break;
      }
    }
    if (!failed) *reinterpret_cast<volatile uint32_t*>(flag) = 0;
  }
  if (__syncthreads_or(failed)) return;

  // 4. Reduce in rank order (our own contribution straight from the input).
  for (size_t c = begin + threadIdx.x; c < end; c += blockDim.x) {
    Acc acc[E];
    for (int r = 0; r < n; ++r) {
      const uint4 v = r == me ? loadChunk<T, uint4>(send, c * E, a.count, sendAligned)
                              : __ldcv(reinterpret_cast<const uint4*>(slotOf<T>(a, phase, r)) + c);
      accumulate<T, Op>(acc, v, r == 0);
    }
    storeChunk(recv, c * E, a.count, recvAligned, finishChunk<T, Op, uint4>(acc, n));
  }

  // 5. The last block to finish advances the epoch for the next call.
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(&a.state->done, 1u) == gridDim.x - 1) {
    st->done = 0;
    st->epoch = call;
    __threadfence();
  }
}

using KernelFn = void (*)(const ProxyKernelArgs);

const KernelFn kKernels[rcnNumTypes][rcnNumOps] = RCN_KERNEL_TABLE(proxyKernel);

}  // namespace

rcnResult_t launchProxyKernel(const ProxyKernelArgs& args, rcnDataType_t dtype, rcnRedOp_t op,
                              const OneShotGrid& grid, bool programmaticLaunch, cudaStream_t stream) {
  return launchKernel(kKernels[dtype][op], grid, programmaticLaunch, stream, args);
}

}  // namespace rcn
