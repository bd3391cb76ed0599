// The one-shot all-reduce kernel (see one_shot.h for the two protocols).
// One template instance per (dtype, op): 12 x 5 = 60; the protocol is a
// runtime argument so it adds no instances.
#include "kernels/one_shot.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/reduce_ops.cuh"

namespace rcn {

namespace {

// Threads per block are capped at 512 so that every instance gets 128 registers.
constexpr int kMaxThreads = 512;

size_t roundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

// ---- PTX helpers -----------------------------------------------------------

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

// LL lines: one 16-byte access; each 8-byte half (data word + flag word) is
// written and read whole, so a flag equal to the call vouches for its word.
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

// ---- bounded waits ---------------------------------------------------------

// Records the first failure of this communicator's calls: the device flag
// stops later calls, the host-mapped record tells the host who was missing.
__device__ void recordError(const OneShotArgs& a, uint32_t code, int peer, uint32_t call) {
  if (atomicCAS(&a.state[0], 0u, 1u) != 0u) return;
  volatile OneShotError* e = a.error;
  e->peer = static_cast<uint32_t>(peer);
  e->block = blockIdx.x;
  e->call = call;
  __threadfence_system();
  e->code = code;
  __threadfence_system();
}

// Spinning is cheap; the clock and the host-mapped abort flag are read only
// every so many spins so that a healthy wait stays on local memory.
struct WaitBudget {
  uint32_t spins = 0;
  uint64_t start = 0;

  // kOneShotOk while the wait may go on.
  __device__ uint32_t check(const OneShotArgs& a) {
    if ((++spins & 63u) != 0) return kOneShotOk;
    const uint64_t now = globalTimerNs();
    if (start == 0) start = now;
    if (now - start > a.timeoutNs) return kOneShotTimeout;
    if (*reinterpret_cast<volatile uint32_t*>(&a.state[0]) != 0) return kOneShotAborted;
    // Host memory is read by the lowest lane still spinning in each warp; it
    // then sets the device flag that the others see.
    const bool reader = (threadIdx.x & 31) == static_cast<unsigned>(__ffs(__activemask()) - 1);
    if ((spins & 4095u) == 0 && reader && *a.abortFlag != 0) return kOneShotAborted;
    return kOneShotOk;
  }
};

// ---- chunk loads and stores ------------------------------------------------

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

template <typename T, typename Op, typename V, typename Acc, int E>
__device__ inline V finishChunk(const Acc (&acc)[E], int nranks) {
  V out{};
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int j = 0; j < E; ++j) o[j] = ElemTraits<T>::fromAcc(Op::finish(acc[j], nranks));
  return out;
}

// ---- the start and end of every call --------------------------------------

// PDL: allow the next kernel to be scheduled now, then wait until every
// earlier kernel on the stream has finished and its writes are visible. Both
// are no-ops when the launch did not ask for programmatic serialization.
__device__ inline void waitForPreviousKernels() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// The call number of this block's slot; 0 when an earlier call failed.
// Call numbers tag flags and lines, and 0 means "cleared", so 0 is skipped on
// wrap-around (0xffffffff is followed by 2, keeping the phase alternating).
__device__ inline uint32_t callNumber(const OneShotArgs& a) {
  const uint32_t failed = __ldcg(a.state);
  uint32_t call = __ldcg(a.state + 1 + blockIdx.x) + 1;
  if (call == 0) call = 2;
  return failed ? 0 : call;
}

// Advances every slot this block owns. Callers have passed a block barrier
// since reading the slot, so no thread of this block still needs it.
__device__ void finishCall(const OneShotArgs& a, uint32_t call) {
  for (int j = blockIdx.x + threadIdx.x * gridDim.x; j < a.maxBlocks; j += blockDim.x * gridDim.x)
    a.state[1 + j] = call;
}

__device__ inline char* slotOf(const OneShotArgs& a, int owner, int phase, int from) {
  const RegionLayout& L = a.layout;
  return a.region[owner] + L.slotsOffset + (static_cast<size_t>(phase) * a.nranks + from) * L.slotBytes;
}

__device__ inline uint32_t* flagOf(const OneShotArgs& a, int owner, int phase, int from) {
  const RegionLayout& L = a.layout;
  return reinterpret_cast<uint32_t*>(a.region[owner] + L.flagsOffset) +
         (static_cast<size_t>(phase) * a.nranks + from) * a.maxBlocks + blockIdx.x;
}

__device__ inline uint4* linesOf(const OneShotArgs& a, int owner, int phase, int from) {
  const RegionLayout& L = a.layout;
  return reinterpret_cast<uint4*>(a.region[owner] + L.llOffset +
                                  (static_cast<size_t>(phase) * a.nranks + from) * L.llSlotBytes);
}

// ---- protocol: separate flags ----------------------------------------------

template <typename T, typename Op>
__device__ void runFlags(const OneShotArgs& a, uint32_t call) {
  using Acc = typename ElemTraits<T>::Acc;
  constexpr int E = 16 / sizeof(T);
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const T* send = static_cast<const T*>(a.send);
  T* recv = static_cast<T*>(a.recv);
  const bool sendAligned = (reinterpret_cast<uintptr_t>(send) & 15) == 0;
  const bool recvAligned = (reinterpret_cast<uintptr_t>(recv) & 15) == 0;

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
  if (peer < n && peer != me) storeReleaseSys(flagOf(a, peer, phase, me), call);

  // 3. Wait for every peer's flag for this block, then clear it: a flag is
  // either 0 or the current call, so no stale value can ever match.
  int failed = 0;
  if (peer < n && peer != me) {
    uint32_t* flag = flagOf(a, me, phase, peer);
    WaitBudget budget;
    while (loadAcquireSys(flag) != call) {
      const uint32_t why = budget.check(a);
      if (why != kOneShotOk) {
        recordError(a, why, peer, call);
        failed = 1;
        break;
      }
    }
    if (!failed) *reinterpret_cast<volatile uint32_t*>(flag) = 0;
  }
  if (__syncthreads_or(failed)) return;

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
  const T* send = static_cast<const T*>(a.send);
  T* recv = static_cast<T*>(a.recv);
  const bool sendAligned = (reinterpret_cast<uintptr_t>(send) & 7) == 0;
  const bool recvAligned = (reinterpret_cast<uintptr_t>(recv) & 7) == 0;

  // Thread t of the grid owns 8-byte units t, t + stride, ...
  const size_t units = (a.count * sizeof(T) + 7) / 8;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  // 1. Each unit, tagged twice with the call number, into every peer's lines.
  uint2 firstUnit = make_uint2(0, 0);  // kept for step 2: most threads own one unit
  for (size_t u = first; u < units; u += stride) {
    const uint2 d = loadChunk<T, uint2>(send, u * E, a.count, sendAligned);
    if (u == first) firstUnit = d;
    const uint4 line = make_uint4(d.x, call, d.y, call);
    for (int i = 1; i < n; ++i) storeLine(linesOf(a, (me + i) % n, phase, me) + u, line);
  }

  // 2. Poll each peer's line until it carries this call; reduce in rank order.
  int failed = 0;
  for (size_t u = first; u < units && !failed; u += stride) {
    Acc acc[E];
    for (int r = 0; r < n && !failed; ++r) {
      uint2 d;
      if (r == me) {
        d = u == first ? firstUnit : loadChunk<T, uint2>(send, u * E, a.count, sendAligned);
      } else {
        const uint4* src = linesOf(a, me, phase, r) + u;
        uint4 line = loadLine(src);
        WaitBudget budget;
        while (line.y != call || line.w != call) {
          const uint32_t why = budget.check(a);
          if (why != kOneShotOk) {
            recordError(a, why, r, call);
            failed = 1;
            break;
          }
          line = loadLine(src);
        }
        d = make_uint2(line.x, line.z);
        // Clear the tags once read, so a line only ever holds 0 or the current call.
        storeLine(const_cast<uint4*>(src), make_uint4(0, 0, 0, 0));
      }
      accumulate<T, Op>(acc, d, r == 0);
    }
    if (!failed) storeChunk(recv, u * E, a.count, recvAligned, finishChunk<T, Op, uint2>(acc, n));
  }
  if (__syncthreads_or(failed)) return;
  finishCall(a, call);
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kMaxThreads) oneShotKernel(const OneShotArgs a, int ll) {
  waitForPreviousKernels();
  const uint32_t call = callNumber(a);
  if (call == 0) return;  // an earlier call lost a peer: do nothing, never wait again
  if (ll)
    runLL<T, Op>(a, call);
  else
    runFlags<T, Op>(a, call);
}

using KernelFn = void (*)(const OneShotArgs, int);

#define RCN_ONE_SHOT_OPS(T)                                                                   \
  {                                                                                           \
    oneShotKernel<T, OpSum>, oneShotKernel<T, OpProd>, oneShotKernel<T, OpMax>,               \
        oneShotKernel<T, OpMin>, oneShotKernel<T, OpAvg>                                      \
  }

// Rows in rcnDataType_t order, columns in rcnRedOp_t order.
const KernelFn kKernels[rcnNumTypes][rcnNumOps] = {
    RCN_ONE_SHOT_OPS(int8_t),        RCN_ONE_SHOT_OPS(uint8_t),       RCN_ONE_SHOT_OPS(int32_t),
    RCN_ONE_SHOT_OPS(uint32_t),      RCN_ONE_SHOT_OPS(int64_t),       RCN_ONE_SHOT_OPS(uint64_t),
    RCN_ONE_SHOT_OPS(__half),        RCN_ONE_SHOT_OPS(float),         RCN_ONE_SHOT_OPS(double),
    RCN_ONE_SHOT_OPS(__nv_bfloat16), RCN_ONE_SHOT_OPS(__nv_fp8_e4m3), RCN_ONE_SHOT_OPS(__nv_fp8_e5m2),
};

#undef RCN_ONE_SHOT_OPS

}  // namespace

RegionLayout regionLayout(int nranks, size_t maxBytes, int maxBlocks, size_t llMaxBytes) {
  RegionLayout L{};
  const size_t perPhase = static_cast<size_t>(2) * nranks;  // [2 phases][nranks]
  L.flagsOffset = 0;
  // Separate-flag slots only exist for messages the LL protocol does not take.
  L.slotBytes = maxBytes > llMaxBytes ? roundUp(maxBytes, 16) : 0;
  L.slotsOffset = roundUp(perPhase * maxBlocks * sizeof(uint32_t), 256);
  L.llSlotBytes = roundUp(2 * llMaxBytes, 16);
  L.llOffset = roundUp(L.slotsOffset + perPhase * L.slotBytes, 256);
  L.totalBytes = roundUp(L.llOffset + perPhase * L.llSlotBytes, 256);
  return L;
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

rcnResult_t launchOneShot(const OneShotArgs& args, rcnDataType_t dtype, rcnRedOp_t op,
                          const OneShotGrid& grid, const OneShotLaunchOptions& options,
                          cudaStream_t stream) {
  const KernelFn kernel = kKernels[dtype][op];
  const int ll = grid.protocol == OneShotProtocol::LL ? 1 : 0;
  if (!options.programmaticLaunch) {
    kernel<<<grid.blocks, grid.threads, 0, stream>>>(args, ll);
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
  RCN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args, ll));
  return rcnSuccess;
}

}  // namespace rcn
