// Decode attention over the KV cache (launchAttention in gpu_kernels.h).
// Block (head, token, split), 512 threads. The token's positions 0..p are
// spread evenly over the s splits: split z takes [z * span, (z + 1) * span)
// up to p, span = ceil((p + 1) / s), so the work is even however much of the
// cache is in use (splits past p stay empty). With one split the block
// writes the output; with several it writes its running max, exp-sum and
// unnormalised sum (flash-decoding), and the last split of a (token, head)
// to finish merges them all, in split order, so no second kernel is needed.
// Decode attention is latency-bound, so the kernel is built around memory
// latencies: before it waits for the previous kernel it asks L2 for its key
// and value rows (a hint: positions before this step's were written by
// earlier steps, and a prefetch of the row being written is harmless); every
// thread reads 4 consecutive values at a time (one 8- or 16-byte load), a
// key row is shared by a few threads whose partial dot products meet through
// shuffles, each thread issues the loads of several key rows (and of its
// first value rows) before it uses any, and the merge loads every split's
// numbers at once. How the work is divided: attention_plan.h.
#include "attention_plan.h"
#include "gpu_kernels.h"
#include "kernel_common.cuh"

namespace engine {
namespace {

__device__ inline float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline float4 load4(const __nv_bfloat16* p) { return bf16x4ToFloat4(*reinterpret_cast<const uint2*>(p)); }

__device__ inline float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// Merges the splits of one (token, head) in split order into out.
template <typename T>
__device__ void mergeSplits(T* out, const float* parts, int d, int splits) {
  float maxOf[kAttentionMaxSplits], sumOf[kAttentionMaxSplits];
#pragma unroll
  for (int z = 0; z < kAttentionMaxSplits; ++z) {
    maxOf[z] = z < splits ? __ldcg(parts + z * (d + 2)) : -INFINITY;
    sumOf[z] = z < splits ? __ldcg(parts + z * (d + 2) + 1) : 0.0f;
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
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0;
#pragma unroll
    for (int z = 0; z < kAttentionMaxSplits; ++z)
      if (sumOf[z] > 0) acc += __ldcg(parts + z * (d + 2) + 2 + j) * weight[z];
    out[j] = fromFloat<T>(acc / total);
  }
}

// One split of one (token, head): writes the output (one split) or the
// split's [max, sum, acc[d]] to `mine`.
template <typename T>
__device__ void attendSplit(T* out, float* mine, const T* qkv, const T* keys, const T* values, int i, int h,
                            int begin, int last, const AttentionShape& s, int chunk, int rowThreads, int splits) {
  extern __shared__ __align__(16) float shared[];  // read and written as float4 too
  const int d = s.headDim, count = last - begin + 1;
  const int valueGroups = blockDim.x / (d / 4);
  float* scores = shared;                          // [chunk]
  float* partial = scores + (chunk + 3) / 4 * 4;  // [valueGroups][d], 16-byte aligned
  const size_t rowStride = size_t(s.kvHeads) * d;
  const T* q = qkv + i * size_t(s.heads + 2 * s.kvHeads) * d + size_t(h) * d;

  // Values: a group of d / 4 threads per row, 4 values each; group g takes
  // the positions g, g + valueGroups, ... Its first kValueRowsAhead rows are
  // loaded now, so that their latency hides behind the scores and softmax.
  const int group = threadIdx.x / (d / 4), j4 = threadIdx.x % (d / 4) * 4;
  const bool valueThread = group < valueGroups;
  float4 firstValues[kValueRowsAhead];
#pragma unroll
  for (int a = 0; a < kValueRowsAhead; ++a) {
    const int t = group + a * valueGroups;
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
      if (group + a * valueGroups < count) add(group + a * valueGroups, firstValues[a]);
#pragma unroll 4
    for (int t = group + kValueRowsAhead * valueGroups; t < count; t += valueGroups)
      add(t, load4(values + size_t(begin + t) * rowStride + j4));
    *reinterpret_cast<float4*>(partial + group * d + j4) = acc;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0;
    for (int g = 0; g < valueGroups; ++g) acc += partial[g * d + j];
    if (splits == 1) {
      out[j] = fromFloat<T>(acc / total);
    } else {
      mine[2 + j] = acc;
      if (j == 0) mine[0] = maxScore, mine[1] = total;
    }
  }
}

// Asks L2 for the key and value rows of positions [begin, last] (the
// kernel's own rows, read before the wait: a hint, right or not).
template <typename T>
__device__ void prefetchRows(const T* keys, const T* values, int begin, int last, const AttentionShape& s) {
  const uint32_t rowBytes = s.headDim * sizeof(T);
  if (rowBytes % 16 != 0) return;
  const size_t rowStride = size_t(s.kvHeads) * s.headDim;
  for (int t = begin + threadIdx.x; t <= last; t += blockDim.x) {
    prefetchL2(keys + size_t(t) * rowStride, rowBytes);
    prefetchL2(values + size_t(t) * rowStride, rowBytes);
  }
}

// `counters` (one per token and head, zero between calls) count the
// finished splits; the last one resets its counter for the next call.
template <typename T>
__global__ void __launch_bounds__(kAttentionThreads) attentionKernel(T* out, float* partials, unsigned* counters,
                                                                     const T* qkv, const T* keyCache,
                                                                     const T* valueCache, TokenPlacement place,
                                                                     AttentionShape s, int chunk, int rowThreads) {
  const int d = s.headDim, i = blockIdx.y, h = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
  const int kvh = (s.headStart + h) / s.group - s.kvStart;
  // The head's cache of sequence seq starts at cacheAt(seq); the positions
  // 0..pos are spread evenly over the splits, each taking `span` of them
  // (chunk, from the whole context, is the most a split can take).
  auto cacheAt = [&](int seq) { return size_t(seq) * s.maxContext * s.kvHeads * d + size_t(kvh) * d; };
  auto spanOf = [&](int pos) { return min((pos + splits) / splits, chunk); };
  const int hintPos = min(__ldcg(place.pos + i), s.maxContext - 1), hintSpan = spanOf(hintPos);
  const size_t hintAt = cacheAt(__ldcg(place.seq + i));
  prefetchRows(keyCache + hintAt, valueCache + hintAt, split * hintSpan,
               min(hintPos, split * hintSpan + hintSpan - 1), s);
  waitForPrevious();
  const int pos = place.pos[i], span = spanOf(pos);
  const int begin = split * span, last = min(pos, begin + span - 1);
  T* headOut = out + (size_t(i) * s.heads + h) * d;
  float* parts = partials + (size_t(i) * s.heads + h) * splits * (d + 2);
  float* mine = parts + split * (d + 2);  // [max, sum, acc[d]]
  if (begin <= last) {
    const size_t at = cacheAt(place.seq[i]);
    attendSplit(headOut, mine, qkv, keyCache + at, valueCache + at, i, h, begin, last, s, chunk,
                rowThreads, splits);
  } else {  // the whole split lies beyond this token's position
    for (int j = threadIdx.x; j < d + 2; j += blockDim.x) mine[j] = j == 0 ? -INFINITY : 0.0f;
  }
  if (splits == 1) return;
  __shared__ bool lastSplit;
  __threadfence();  // this thread's writes to `mine` are visible on the GPU
  __syncthreads();  // ... for every thread, before the count goes up
  if (threadIdx.x == 0) {
    unsigned* counter = counters + size_t(i) * s.heads + h;
    lastSplit = atomicAdd(counter, 1u) == unsigned(splits - 1);
    if (lastSplit) *counter = 0;
  }
  __syncthreads();
  if (!lastSplit) return;
  __threadfence();
  mergeSplits(headOut, parts, d, splits);
}

}  // namespace

size_t attentionScratchFloats(int tokens, const AttentionShape& s) {
  return size_t(tokens) * s.heads * kAttentionMaxSplits * (s.headDim + 2);
}

cudaError_t launchAttention(DType t, void* out, float* scratch, unsigned* counters, const void* qkv, const void* keyCache,
                            const void* valueCache, TokenPlacement place, int n, int splits, const AttentionShape& s,
                            Launch on) {
  const int block = kAttentionThreads;
  if (s.headDim > 256 || s.headDim % 4 != 0 || splits < 1 || splits > kAttentionMaxSplits) return cudaErrorInvalidValue;
  const int chunk = attentionChunk(s.maxContext, splits);
  const size_t smem = attentionSharedBytes(chunk, s.headDim);
  dim3 grid(s.heads, n, splits);
  if (smem > 48 * 1024) {
    cudaError_t e = t == DType::F32
        ? cudaFuncSetAttribute(attentionKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem))
        : cudaFuncSetAttribute(attentionKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  const int rowThreads = keyRowThreads(s.headDim);
  return ENGINE_DISPATCH(t, attentionKernel, grid, dim3(block), smem, on, static_cast<T*>(out), scratch, counters,
                         static_cast<const T*>(qkv), static_cast<const T*>(keyCache),
                         static_cast<const T*>(valueCache), place, s, chunk, rowThreads);
}

}  // namespace engine
