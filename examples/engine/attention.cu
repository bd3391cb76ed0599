// SPDX-License-Identifier: BSD-3-Clause
// Decode attention over the KV cache (launchAttention in gpu_kernels.h).
// Block (split, head, token), 512 threads. The token's positions 0..p are
// spread evenly over the s splits: split z takes [z * span, (z + 1) * span)
// up to p, span = ceil((p + 1) / s), so the work is even however much of the
// cache is in use (splits past p stay empty). With one split the block
// writes the output. The splits of a (token, head) form a thread block
// cluster: each keeps its running max, exp-sum and unnormalised sum
// (flash-decoding) in shared memory, and block 0 of the cluster merges them
// in split order through distributed shared memory, so that no partial
// result goes through global memory and no second kernel is needed.
// Decode attention is latency-bound, so the kernel is built around memory
// latencies: before it waits for the previous kernel it asks L2 for its key
// and value rows (a hint: positions before this step's were written by
// earlier steps, and a prefetch of the row being written is harmless); every
// thread reads 4 consecutive values at a time (one 8- or 16-byte load), a
// key row is shared by a few threads whose partial dot products meet through
// shuffles, and each thread issues the loads of several key rows (and of its
// first value rows) before it uses any. Each kernel comes in two builds: one
// block per SM with all the registers it wants, and two per SM (64 registers
// a thread) for passes with more blocks than SMs. How the work is divided:
// attention_plan.h.
#include <cooperative_groups.h>

#include "attention_plan.h"
#include "gpu_kernels.h"
#include "kernel_common.cuh"

namespace engine {
namespace {

namespace cg = cooperative_groups;

__device__ inline float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline float4 load4(const __nv_bfloat16* p) { return bf16x4ToFloat4(*reinterpret_cast<const uint2*>(p)); }

__device__ inline float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// Merges the splits of one (token, head) in split order into out: split z
// left its [max, sum, acc[d]] in `merged` of the cluster's block z. Thread j
// writes output j (d <= kAttentionMaxHeadDim <= kAttentionThreads); the
// others have nothing to read.
template <typename T>
__device__ void mergeSplits(T* out, cg::cluster_group& cluster, float* merged, int d, int splits) {
  static_assert(kAttentionMaxHeadDim <= kAttentionThreads, "one thread an output");
  const int j = threadIdx.x;
  if (j >= d) return;
  const float* part[kAttentionMaxSplits];
  float maxOf[kAttentionMaxSplits], sumOf[kAttentionMaxSplits];
#pragma unroll
  for (int z = 0; z < kAttentionMaxSplits; ++z) {
    part[z] = z < splits ? cluster.map_shared_rank(merged, z) : nullptr;
    maxOf[z] = part[z] ? part[z][0] : -INFINITY;
    sumOf[z] = part[z] ? part[z][1] : 0.0f;
  }
  float maxScore = -INFINITY;
#pragma unroll
  for (int z = 0; z < kAttentionMaxSplits; ++z) maxScore = fmaxf(maxScore, maxOf[z]);
  float weight[kAttentionMaxSplits], total = 0;
#pragma unroll
  for (int z = 0; z < kAttentionMaxSplits; ++z) {
    weight[z] = sumOf[z] > 0 ? __expf(maxOf[z] - maxScore) : 0.0f;
    if (sumOf[z] > 0) total += sumOf[z] * weight[z];
  }
  float acc = 0;
#pragma unroll
  for (int z = 0; z < kAttentionMaxSplits; ++z)
    if (sumOf[z] > 0) acc += part[z][2 + j] * weight[z];
  out[j] = fromFloat<T>(acc / total);
}

// One split of one (token, head): writes the output (one split) or the
// split's [max, sum, acc[d]] to `mine`; `scores` and `partial` are its
// shared-memory workspace (the kernel's layout).
template <typename T>
__device__ void attendSplit(T* out, float* scores, float* partial, float* mine, const T* qkv, const T* keys,
                            const T* values, int i, int h, int begin, int last, const AttentionShape& s, int rowThreads,
                            int splits) {
  const int d = s.headDim, count = last - begin + 1;
  const int groups = valueGroups(d);
  const size_t rowStride = size_t(s.kvHeads) * d;
  const T* q = qkv + i * size_t(s.heads + 2 * s.kvHeads) * d + size_t(h) * d;

  // Values: a group of d / 4 threads per row, 4 values each; group g takes
  // the positions g, g + groups, ... Its first kValueRowsAhead rows are
  // loaded now, so that their latency hides behind the scores and softmax.
  const int group = threadIdx.x / (d / 4), j4 = threadIdx.x % (d / 4) * 4;
  const bool valueThread = group < groups;
  float4 firstValues[kValueRowsAhead];
#pragma unroll
  for (int a = 0; a < kValueRowsAhead; ++a) {
    const int t = group + a * groups;
    firstValues[a] = valueThread && t < count ? load4(values + size_t(begin + t) * rowStride + j4)
                                              : make_float4(0, 0, 0, 0);
  }

  // Scores: rowThreads threads per key row, every thread through the same
  // number of rounds (clamped rows) so the shuffles see whole warps; a round
  // takes kKeyRowsAhead rows a thread, their loads issued together (with
  // q's, read straight from global memory: no barrier before the first).
  const int slots = blockDim.x / rowThreads, slot = threadIdx.x / rowThreads, sub = threadIdx.x % rowThreads;
  const float scale = rsqrtf(float(d));
  for (int base = begin; base <= last; base += kKeyRowsAhead * slots) {
    float dots[kKeyRowsAhead] = {};
    for (int j = sub * 4; j < d; j += rowThreads * 4) {
      float4 k[kKeyRowsAhead];
#pragma unroll
      for (int a = 0; a < kKeyRowsAhead; ++a)
        k[a] = load4(keys + size_t(min(base + a * slots + slot, last)) * rowStride + j);
      const float4 qj = load4(q + j);
#pragma unroll
      for (int a = 0; a < kKeyRowsAhead; ++a) dots[a] += dot4(k[a], qj);
    }
#pragma unroll
    for (int a = 0; a < kKeyRowsAhead; ++a) {
      for (int offset = rowThreads / 2; offset > 0; offset >>= 1)
        dots[a] += __shfl_xor_sync(0xffffffffu, dots[a], offset);
      const int t = base + a * slots + slot;
      if (sub == 0 && t <= last) scores[t - begin] = dots[a] * scale;
    }
  }
  __syncthreads();
  float localMax = -INFINITY;
  for (int t = threadIdx.x; t < count; t += blockDim.x) localMax = fmaxf(localMax, scores[t]);
  const float maxScore = blockMax(localMax);
  float localSum = 0;
  for (int t = threadIdx.x; t < count; t += blockDim.x) localSum += scores[t] = __expf(scores[t] - maxScore);
  const float total = blockSum(localSum);  // also orders the score writes before the reads below

  if (valueThread) {
    float4 acc = make_float4(0, 0, 0, 0);
    auto add = [&](int t, float4 v) {
      const float p = scores[t];
      acc.x += p * v.x, acc.y += p * v.y, acc.z += p * v.z, acc.w += p * v.w;
    };
#pragma unroll
    for (int a = 0; a < kValueRowsAhead; ++a)
      if (group + a * groups < count) add(group + a * groups, firstValues[a]);
#pragma unroll 4
    for (int t = group + kValueRowsAhead * groups; t < count; t += groups)
      add(t, load4(values + size_t(begin + t) * rowStride + j4));
    *reinterpret_cast<float4*>(partial + group * d + j4) = acc;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0;
    for (int g = 0; g < groups; ++g) acc += partial[g * d + j];
    if (splits == 1) {
      out[j] = fromFloat<T>(acc / total);
    } else {
      mine[2 + j] = acc;
      if (j == 0) mine[0] = maxScore, mine[1] = total;
    }
  }
}

// Asks L2 for the key and value rows of positions [begin, last], at most
// maxRows of them (the kernel's own rows, read before the wait: a hint,
// right or not; attentionPrefetchRows says why not always all).
template <typename T>
__device__ void prefetchRows(const T* keys, const T* values, int begin, int last, int maxRows,
                             const AttentionShape& s) {
  const uint32_t rowBytes = s.headDim * sizeof(T);
  if (rowBytes % 16 != 0) return;
  const size_t rowStride = size_t(s.kvHeads) * s.headDim;
  if (last - begin >= maxRows) last = begin + maxRows - 1;
  for (int t = begin + threadIdx.x; t <= last; t += blockDim.x) {
    prefetchL2(keys + size_t(t) * rowStride, rowBytes);
    prefetchL2(values + size_t(t) * rowStride, rowBytes);
  }
}

// Block (split, head, token); the splits of a (token, head) are one cluster.
template <typename T, int kBlocksPerSm>
__global__ void __launch_bounds__(kAttentionThreads, kBlocksPerSm)
    attentionKernel(T* out, const T* qkv, const T* keyCache, const T* valueCache, TokenPlacement place,
                    AttentionShape s, int chunk, int rowThreads, int prefetchMaxRows) {
  const int d = s.headDim, split = blockIdx.x, splits = gridDim.x, h = blockIdx.y, i = blockIdx.z;
  const int kvh = (s.headStart + h) / s.group - s.kvStart;
  // The head's cache of sequence seq starts at cacheAt(seq); the positions
  // 0..pos are spread evenly over the splits, each taking `span` of them
  // (chunk, from the whole context, is the most a split can take).
  auto cacheAt = [&](int seq) { return size_t(seq) * s.maxContext * s.kvHeads * d + size_t(kvh) * d; };
  auto spanOf = [&](int pos) { return min((pos + splits) / splits, chunk); };
  const int hintPos = min(__ldcg(place.pos + i), s.maxContext - 1), hintSpan = spanOf(hintPos);
  const size_t hintAt = cacheAt(__ldcg(place.seq + i));
  prefetchRows(keyCache + hintAt, valueCache + hintAt, split * hintSpan,
               min(hintPos, split * hintSpan + hintSpan - 1), prefetchMaxRows, s);
  waitForPrevious();
  const int pos = place.pos[i], span = spanOf(pos);
  const int begin = split * span, last = min(pos, begin + span - 1);
  T* headOut = out + (size_t(i) * s.heads + h) * d;
  // Shared memory (attentionSharedLayout), read and written as float4 too:
  extern __shared__ __align__(16) float shared[];
  const AttentionSharedLayout layout = attentionSharedLayout(chunk, d, splits);
  float* scores = shared;                    // [chunk]
  float* partial = shared + layout.partial;  // [value groups][d]
  float* mine = shared + layout.mine;        // [max, sum, acc[d]] of this split, for the merge
  if (begin <= last) {
    const size_t at = cacheAt(place.seq[i]);
    attendSplit(headOut, scores, partial, mine, qkv, keyCache + at, valueCache + at, i, h, begin, last, s,
                rowThreads, splits);
  } else if (splits > 1 && threadIdx.x == 0) {  // the whole split lies beyond this token's position:
    mine[0] = -INFINITY, mine[1] = 0.0f;         // a sum of 0, so the merge reads none of its acc
  }
  if (splits == 1) return;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every split's `mine` is written and visible to the cluster
  if (split == 0) mergeSplits(headOut, cluster, mine, d, splits);
  cluster.sync();  // a block's shared memory lives as long as the block: stay until block 0 has read it
}

// Launches the instance for (T, blocks per SM), its dynamic shared memory
// limit raised first where needed.
template <typename T, int kBlocksPerSm>
cudaError_t launchAttentionBuild(T* out, const void* qkv, const void* keyCache, const void* valueCache,
                                TokenPlacement place, int n, int splits, int prefetchRows, const AttentionShape& s,
                                Launch on) {
  constexpr auto kernel = attentionKernel<T, kBlocksPerSm>;
  const size_t smem = attentionPassBytes(s.maxContext, s.headDim, splits);
  cudaError_t e = allowKernelShared<kernel>(smem);
  if (e != cudaSuccess) return e;
  return launchInClusters(splits, kernel, dim3(splits, s.heads, n), dim3(kAttentionThreads), smem, on, out,
                          static_cast<const T*>(qkv), static_cast<const T*>(keyCache),
                          static_cast<const T*>(valueCache), place, s, attentionChunk(s.maxContext, splits),
                          keyRowThreads(s.headDim), prefetchRows);
}

template <typename T, int kBlocksPerSm>
cudaError_t residentBlocksOf(size_t smem, int* blocks) {
  cudaError_t e = allowKernelShared<attentionKernel<T, kBlocksPerSm>>(smem);
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, attentionKernel<T, kBlocksPerSm>, kAttentionThreads,
                                                       smem);
}

template <typename T, int kBlocks>
struct Build {
  using Type = T;
  static constexpr int kBlocksPerSm = kBlocks;
};

// Calls use(Build<T, blocks per SM>{}) for the kernel instance of (t,
// blocksPerSm); cudaErrorInvalidValue for a blocksPerSm that has none.
template <typename Use>
cudaError_t withBuild(DType t, int blocksPerSm, Use use) {
  if (blocksPerSm < 1 || blocksPerSm > kAttentionMaxBlocksPerSm) return cudaErrorInvalidValue;
  if (t == DType::F32) return blocksPerSm == 2 ? use(Build<float, 2>{}) : use(Build<float, 1>{});
  return blocksPerSm == 2 ? use(Build<__nv_bfloat16, 2>{}) : use(Build<__nv_bfloat16, 1>{});
}

}  // namespace

cudaError_t attentionResidentBlocks(DType t, int blocksPerSm, size_t sharedBytes, int* blocks) {
  return withBuild(t, blocksPerSm, [&](auto build) {
    using B = decltype(build);
    return residentBlocksOf<typename B::Type, B::kBlocksPerSm>(sharedBytes, blocks);
  });
}

cudaError_t launchAttention(DType t, void* out, const void* qkv, const void* keyCache, const void* valueCache,
                            TokenPlacement place, int n, int splits, int blocksPerSm, int prefetchRows,
                            const AttentionShape& s, Launch on) {
  if (s.headDim > kAttentionMaxHeadDim || s.headDim % 4 != 0 || splits < 1 || splits > kAttentionMaxSplits)
    return cudaErrorInvalidValue;
  return withBuild(t, blocksPerSm, [&](auto build) {
    using B = decltype(build);
    using T = typename B::Type;
    return launchAttentionBuild<T, B::kBlocksPerSm>(static_cast<T*>(out), qkv, keyCache, valueCache, place, n,
                                                    splits, prefetchRows, s, on);
  });
}

}  // namespace engine
