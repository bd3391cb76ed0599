// The proxy path's kernel (see proxy_kernel.h). Element types and ops come
// from kernels/reduce_ops.cuh, shared with the p2p kernel. One instance per
// (dtype, op).
#include "transport/proxy/proxy_kernel.h"

#include "core/check.h"
#include "kernels/reduce_ops.cuh"

namespace rcn {

namespace {

constexpr int kMaxThreads = 512;

__device__ inline uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ inline void storeReleaseSys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ inline uint32_t loadAcquireSys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ void recordError(const ProxyKernelArgs& a, uint32_t code, int peer, uint32_t call) {
  if (atomicCAS(&a.state->failed, 0u, 1u) != 0u) return;
  volatile OneShotError* e = a.error;
  e->peer = static_cast<uint32_t>(peer);
  e->block = blockIdx.x;
  e->call = call;
  __threadfence_system();
  e->code = code;
  __threadfence_system();
}

// kOneShotOk while a wait may go on; the clock and the host-mapped abort
// flag are read only every so many spins.
__device__ inline uint32_t waitCheck(const ProxyKernelArgs& a, uint32_t spins, uint64_t* start) {
  if ((spins & 63u) != 0) return kOneShotOk;
  const uint64_t now = globalTimerNs();
  if (*start == 0) *start = now;
  if (now - *start > a.timeoutNs) return kOneShotTimeout;
  if (*reinterpret_cast<volatile uint32_t*>(&a.state->failed) != 0) return kOneShotAborted;
  if (*a.abortFlag != 0) return kOneShotAborted;
  return kOneShotOk;
}

// 16 bytes of elements starting at element `first`; past `count` reads zero.
template <typename T>
__device__ inline uint4 load16(const T* src, size_t first, size_t count, bool aligned) {
  constexpr int E = 16 / sizeof(T);
  if (aligned && first + E <= count) return *reinterpret_cast<const uint4*>(src + first);
  uint4 v = make_uint4(0, 0, 0, 0);
  T* e = reinterpret_cast<T*>(&v);
  for (int j = 0; j < E; ++j)
    if (first + j < count) e[j] = src[first + j];
  return v;
}

template <typename T>
__device__ inline void store16(T* dst, size_t first, size_t count, bool aligned, const uint4& v) {
  constexpr int E = 16 / sizeof(T);
  if (aligned && first + E <= count) {
    *reinterpret_cast<uint4*>(dst + first) = v;
    return;
  }
  const T* e = reinterpret_cast<const T*>(&v);
  for (int j = 0; j < E; ++j)
    if (first + j < count) dst[first + j] = e[j];
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
  // PDL: let the next kernel be scheduled now, then wait until every earlier
  // kernel on the stream finished (no-ops without programmatic serialization).
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  volatile ProxyState* st = a.state;
  if (st->failed) return;  // an earlier call lost a peer: never wait again
  uint32_t call = st->epoch + 1;
  if (call == 0) call = 2;  // 0 means "cleared"; 2 keeps the phase alternating
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
    own[c] = load16(send, c * E, a.count, sendAligned);
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
    uint32_t spins = 0;
    uint64_t start = 0;
    while (loadAcquireSys(flag) != call) {
      const uint32_t why = waitCheck(a, ++spins, &start);
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
      const uint4 v = r == me ? load16(send, c * E, a.count, sendAligned)
                              : __ldcv(reinterpret_cast<const uint4*>(slotOf<T>(a, phase, r)) + c);
      const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const Acc x = ElemTraits<T>::toAcc(e[j]);
        acc[j] = r == 0 ? x : Op::combine(acc[j], x);
      }
    }
    uint4 out = make_uint4(0, 0, 0, 0);
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int j = 0; j < E; ++j) o[j] = ElemTraits<T>::fromAcc(Op::finish(acc[j], n));
    store16(recv, c * E, a.count, recvAligned, out);
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

#define RCN_PROXY_OPS(T)                                                                    \
  {                                                                                         \
    proxyKernel<T, OpSum>, proxyKernel<T, OpProd>, proxyKernel<T, OpMax>,                   \
        proxyKernel<T, OpMin>, proxyKernel<T, OpAvg>                                        \
  }

// Rows in rcnDataType_t order, columns in rcnRedOp_t order.
const KernelFn kKernels[rcnNumTypes][rcnNumOps] = {
    RCN_PROXY_OPS(int8_t),        RCN_PROXY_OPS(uint8_t),       RCN_PROXY_OPS(int32_t),
    RCN_PROXY_OPS(uint32_t),      RCN_PROXY_OPS(int64_t),       RCN_PROXY_OPS(uint64_t),
    RCN_PROXY_OPS(__half),        RCN_PROXY_OPS(float),         RCN_PROXY_OPS(double),
    RCN_PROXY_OPS(__nv_bfloat16), RCN_PROXY_OPS(__nv_fp8_e4m3), RCN_PROXY_OPS(__nv_fp8_e5m2),
};

#undef RCN_PROXY_OPS

}  // namespace

rcnResult_t launchProxyKernel(const ProxyKernelArgs& args, rcnDataType_t dtype, rcnRedOp_t op,
                              const OneShotGrid& grid, bool programmaticLaunch, cudaStream_t stream) {
  const KernelFn kernel = kKernels[dtype][op];
  if (!programmaticLaunch) {
    kernel<<<grid.blocks, grid.threads, 0, stream>>>(args);
    RCN_CUDA_CHECK(cudaGetLastError());
    return rcnSuccess;
  }
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid.blocks);
  config.blockDim = dim3(grid.threads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  RCN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
  return rcnSuccess;
}

}  // namespace rcn
