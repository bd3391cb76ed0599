// SPDX-License-Identifier: BSD-3-Clause
// One kernel per step of the forward pass, each instantiated for fp32 and
// bf16 storage only. Reductions use a fixed order (warp shuffles, then one
// warp over the partials), so every GPU computes bit-identical results.
#include "gpu_kernels.h"

#include "argmax_key.h"
#include "kernel_common.cuh"

namespace engine {
namespace {

// The row kernels below issue a thread's loads of a row together, before
// any of its stores: a store between two loads (x is written in place, and
// nothing tells the compiler that the other pointers do not alias it) makes
// each load wait for the one before, a chain of L2 round trips (ncu, H200:
// the embedding of one llama3-8b token took 9.4 us that way).
constexpr int kRowThreads = 256;  // embedding
constexpr int kNormThreads = 512;
constexpr int kRowHeld = 16;      // values a thread keeps in registers: rows up to kNormThreads x 16 in one pass

template <typename T>
__global__ void __launch_bounds__(kRowThreads) embeddingKernel(float* x, const T* table, const int* tokens, int dim) {
  waitForPrevious();
  const T* row = table + size_t(tokens[blockIdx.x]) * dim;
  float* out = x + size_t(blockIdx.x) * dim;
  for (int first = threadIdx.x; first < dim; first += kRowHeld * kRowThreads) {
    float v[kRowHeld];
#pragma unroll
    for (int k = 0; k < kRowHeld; ++k) {
      const int i = first + k * kRowThreads;
      v[k] = i < dim ? toFloat(row[i]) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kRowHeld; ++k) {
      const int i = first + k * kRowThreads;
      if (i < dim) out[i] = v[k];
    }
  }
}

// Row r: x[row] += delta[row] (in place, when delta is given), then out[r] =
// x[row] * rsqrt(mean square + eps) * weight. A thread's first kRowHeld
// values stay in registers from the load to the scaling (and its weights,
// loaded before the wait: they never depend on the previous kernel); wider
// rows read the rest again.
template <typename T>
__global__ void __launch_bounds__(kNormThreads, 1) addRmsNormKernel(T* out, float* x, const T* delta, const T* weight,
                                                                 const int* rowIndex, int dim, float eps) {
  float w[kRowHeld];
#pragma unroll
  for (int k = 0; k < kRowHeld; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    w[k] = i < dim ? toFloat(weight[i]) : 0.0f;
  }
  waitForPrevious();
  const int r = blockIdx.x;
  const size_t row = rowIndex ? rowIndex[r] : r;
  float* xr = x + row * dim;
  const T* dr = delta ? delta + row * dim : nullptr;
  float v[kRowHeld], d[kRowHeld];  // d: its own registers, so that the delta loads are in flight together too
#pragma unroll
  for (int k = 0; k < kRowHeld; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    v[k] = i < dim ? xr[i] : 0.0f;
    d[k] = dr && i < dim ? toFloat(dr[i]) : 0.0f;
  }
  if (dr) {
#pragma unroll
    for (int k = 0; k < kRowHeld; ++k) v[k] += d[k];
  }
  float squares = 0;
#pragma unroll
  for (int k = 0; k < kRowHeld; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i >= dim) break;
    if (dr) xr[i] = v[k];
    squares += v[k] * v[k];
  }
  const int wide = kRowHeld * kNormThreads;  // the values past the registers
  for (int i = wide + threadIdx.x; i < dim; i += kNormThreads) {
    float u = xr[i];
    if (dr) xr[i] = u = u + toFloat(dr[i]);
    squares += u * u;
  }
  const float scale = rsqrtf(blockSum(squares) / dim + eps);
  T* outRow = out + size_t(r) * dim;
#pragma unroll
  for (int k = 0; k < kRowHeld; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < dim) outRow[i] = fromFloat<T>(v[k] * scale * w[k]);
  }
  for (int i = wide + threadIdx.x; i < dim; i += kNormThreads)
    outRow[i] = fromFloat<T>(xr[i] * scale * toFloat(weight[i]));
}

// Block (head, token): heads [0, heads) are query heads, [heads, heads + kvHeads)
// key heads (which also copy their value head into the cache). The bias, laid
// out like one token's qkv row, is added first (Qwen2), in place.
template <typename T>
__global__ void qkvToCacheKernel(T* qkv, T* keyCache, T* valueCache, const T* bias, const T* qNorm,
                                 const T* kNorm, TokenPlacement place, AttentionShape s) {
  waitForPrevious();
  const int i = blockIdx.y, head = blockIdx.x, d = s.headDim, half = d / 2;
  const bool isQuery = head < s.heads;
  const size_t stride = size_t(s.heads + 2 * s.kvHeads) * d;
  T* vec = qkv + i * stride + size_t(head) * d;  // key heads follow the query heads
  const int pos = place.pos[i];
  const T* norm = isQuery ? qNorm : kNorm;
  if (bias) {  // the same for the whole block, so the barrier is safe
    for (int j = threadIdx.x; j < d; j += blockDim.x)
      vec[j] = fromFloat<T>(toFloat(vec[j]) + toFloat(bias[size_t(head) * d + j]));
    __syncthreads();  // RoPE below reads pairs that other threads biased
  }

  float scale = 1.0f;
  if (norm) {
    float squares = 0;
    for (int j = threadIdx.x; j < d; j += blockDim.x) squares += toFloat(vec[j]) * toFloat(vec[j]);
    scale = rsqrtf(blockSum(squares) / d + s.normEps);
  }
  T* dst = vec;
  if (!isQuery) {
    const int kvh = head - s.heads;
    const size_t cacheAt = ((size_t(place.seq[i]) * s.maxContext + pos) * s.kvHeads + kvh) * d;
    dst = keyCache + cacheAt;
    const size_t vAt = size_t(s.heads + s.kvHeads + kvh) * d;
    const T* v = qkv + i * stride + vAt;
    for (int j = threadIdx.x; j < d; j += blockDim.x)
      valueCache[cacheAt + j] = bias ? fromFloat<T>(toFloat(v[j]) + toFloat(bias[vAt + j])) : v[j];
  }
  for (int p = threadIdx.x; p < half; p += blockDim.x) {
    const int a = s.ropeInterleaved ? 2 * p : p, b = s.ropeInterleaved ? 2 * p + 1 : p + half;
    float x0 = toFloat(vec[a]) * scale, x1 = toFloat(vec[b]) * scale;
    if (norm) {
      x0 *= toFloat(norm[a]);
      x1 *= toFloat(norm[b]);
    }
    const float angle = pos * ropeInverseFrequency(s, p);
    float c, sn;
    sincosf(angle, &sn, &c);
    dst[a] = fromFloat<T>(x0 * c - x1 * sn);
    dst[b] = fromFloat<T>(x0 * sn + x1 * c);
  }
}

template <typename T>
__global__ void swiGluKernel(T* out, const T* gateUp, int hidden) {
  waitForPrevious();
  const size_t row = blockIdx.y;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < hidden; j += gridDim.x * blockDim.x) {
    const float g = toFloat(gateUp[row * 2 * hidden + j]), u = toFloat(gateUp[row * 2 * hidden + hidden + j]);
    out[row * hidden + j] = fromFloat<T>(g / (1.0f + __expf(-g)) * u);
  }
}

// The vocabulary argmax as a 64-bit key (argmax_key.h): the largest key is
// the largest logit, the lowest index on ties, so the maximum over blocks
// (atomicMax) and over ranks (an all-reduce) is the same whatever order they
// come in. A block takes kArgmaxPerBlock logits of one row, each thread
// kArgmaxPerThread of them with all its loads in flight at once: one block
// per row left a step waiting ~50 us on one SM's latency-bound scan.
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxPerThread = 16;
constexpr int kArgmaxPerBlock = kArgmaxThreads * kArgmaxPerThread;

// keys[b] = max(keys[b], best key of this block's logits of row b); keys
// start at 0 (below every real key), as launchTokensFromKeys leaves them.
__global__ void __launch_bounds__(kArgmaxThreads) argmaxKeyKernel(uint64_t* keys, const float* logits, int count,
                                                                  int offset) {
  waitForPrevious();
  const float* row = logits + size_t(blockIdx.y) * count;
  const int first = blockIdx.x * kArgmaxPerBlock + threadIdx.x;
  float values[kArgmaxPerThread];
#pragma unroll
  for (int k = 0; k < kArgmaxPerThread; ++k) {
    const int j = first + k * kArgmaxThreads;
    values[k] = j < count ? __ldcs(row + j) : 0.0f;
  }
  unsigned long long best = 0;
#pragma unroll
  for (int k = 0; k < kArgmaxPerThread; ++k) {
    const int j = first + k * kArgmaxThreads;
    if (j < count) best = max(best, (unsigned long long)argmaxKey(values[k], uint32_t(offset + j)));
  }
  for (int step = 16; step > 0; step >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, step));
  __shared__ unsigned long long warpBest[kArgmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warpBest[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) best = max(best, warpBest[w]);
    atomicMax(reinterpret_cast<unsigned long long*>(keys) + blockIdx.y, best);
  }
}

// tokens[b] = the index keys[b] names; keys[b] goes back to 0 for the next
// step; *nonFinite = 1 where the winner is NaN or infinite.
__global__ void tokensFromKeysKernel(int* tokens, int* pos, uint64_t* keys, int* nonFinite, bool advance) {
  waitForPrevious();
  const uint64_t key = keys[threadIdx.x];
  tokens[threadIdx.x] = argmaxKeyIndex(key);
  if (nonFinite && !argmaxKeyFinite(key)) *nonFinite = 1;
  keys[threadIdx.x] = 0;
  if (advance) pos[threadIdx.x] += 1;
}

template <typename T>
__global__ void randomFillKernel(T* data, size_t n, uint64_t seed, float scale, float offset) {
  waitForPrevious();
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    data[i] = fromFloat<T>(offset + scale * (float(z >> 40) / float(1u << 23) - 1.0f));
  }
}

// out[r] = in[rowIndex ? rowIndex[r] : r], rows of dim elements.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) gatherRowsKernel(T* out, const T* in, const int* rowIndex, int dim) {
  waitForPrevious();
  const size_t row = rowIndex ? rowIndex[blockIdx.x] : blockIdx.x;
  for (int i = threadIdx.x; i < dim; i += kRowThreads) out[size_t(blockIdx.x) * dim + i] = in[row * dim + i];
}

int gridFor(size_t n, int block) { return int((n + block - 1) / block < 4096 ? (n + block - 1) / block : 4096); }

}  // namespace

cudaError_t launchEmbedding(DType t, float* x, const void* embedding, const int* tokens, int n, int dim, Launch on) {
  return ENGINE_DISPATCH(t, embeddingKernel, dim3(n), dim3(kRowThreads), 0, on, x,
                         static_cast<const T*>(embedding), tokens, dim);
}

cudaError_t launchGatherRows(DType t, void* out, const void* in, const int* rowIndex, int rows, int dim, Launch on) {
  return ENGINE_DISPATCH(t, gatherRowsKernel, dim3(rows), dim3(kRowThreads), 0, on, static_cast<T*>(out),
                         static_cast<const T*>(in), rowIndex, dim);
}

cudaError_t launchAddRmsNorm(DType t, void* out, float* x, const void* delta, const void* weight,
                             const int* rowIndex, int rows, int dim, float eps, Launch on) {
  return ENGINE_DISPATCH(t, addRmsNormKernel, dim3(rows), dim3(kNormThreads), 0, on, static_cast<T*>(out), x,
                         static_cast<const T*>(delta), static_cast<const T*>(weight), rowIndex, dim, eps);
}

cudaError_t launchQkvToCache(DType t, void* qkv, void* keyCache, void* valueCache, const void* qkvBias,
                             const void* qNorm, const void* kNorm, TokenPlacement place, int n,
                             const AttentionShape& s, Launch on) {
  dim3 grid(s.heads + s.kvHeads, n);
  return ENGINE_DISPATCH(t, qkvToCacheKernel, grid, dim3(64), 0, on, static_cast<T*>(qkv), static_cast<T*>(keyCache),
                         static_cast<T*>(valueCache), static_cast<const T*>(qkvBias), static_cast<const T*>(qNorm),
                         static_cast<const T*>(kNorm), place, s);
}

cudaError_t launchSwiGlu(DType t, void* out, const void* gateUp, int n, int hidden, Launch on) {
  return ENGINE_DISPATCH(t, swiGluKernel, dim3((hidden + 255) / 256, n), dim3(256), 0, on, static_cast<T*>(out),
                         static_cast<const T*>(gateUp), hidden);
}

cudaError_t launchArgmaxKey(uint64_t* keys, const float* logits, int seqs, int count, int offset, Launch on) {
  const dim3 grid((count + kArgmaxPerBlock - 1) / kArgmaxPerBlock, seqs);
  return launch(argmaxKeyKernel, grid, dim3(kArgmaxThreads), 0, on, keys, logits, count, offset);
}

cudaError_t launchTokensFromKeys(int* tokens, int* pos, uint64_t* keys, int* nonFinite, int seqs, bool advance,
                                 Launch on) {
  return launch(tokensFromKeysKernel, dim3(1), dim3(seqs), 0, on, tokens, pos, keys, nonFinite, advance);
}

cudaError_t launchRandomFill(DType t, void* data, size_t n, uint64_t seed, float scale, float offset, Launch on) {
  return ENGINE_DISPATCH(t, randomFillKernel, dim3(gridFor(n, 256)), dim3(256), 0, on, static_cast<T*>(data), n,
                         seed, scale, offset);
}

}  // namespace engine
