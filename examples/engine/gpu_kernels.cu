// One kernel per step of the forward pass, each instantiated for fp32 and
// bf16 storage only. Reductions use a fixed order (warp shuffles, then one
// warp over the partials), so every GPU computes bit-identical results.
#include "gpu_kernels.h"

#include <cuda_bf16.h>

#include "argmax_key.h"
#include "kernel_common.cuh"

#include <algorithm>

namespace engine {
namespace {

template <typename T>
__global__ void embeddingKernel(float* x, const T* table, const int* tokens, int dim) {
  waitForPrevious();
  const T* row = table + size_t(tokens[blockIdx.x]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) x[size_t(blockIdx.x) * dim + i] = toFloat(row[i]);
}

template <typename T>
__global__ void addRmsNormKernel(T* out, float* x, const T* delta, const T* weight, const int* rowIndex,
                                 int dim, float eps) {
  waitForPrevious();
  const int r = blockIdx.x;
  const size_t row = rowIndex ? rowIndex[r] : r;
  float* xr = x + row * dim;
  float squares = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = xr[i];
    if (delta) xr[i] = v = v + toFloat(delta[row * dim + i]);
    squares += v * v;
  }
  const float scale = rsqrtf(blockSum(squares) / dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    out[size_t(r) * dim + i] = fromFloat<T>(xr[i] * scale * toFloat(weight[i]));
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
    const float angle = pos * (s.ropeFreqs ? s.ropeFreqs[p] : powf(s.ropeTheta, -2.0f * p / d));
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

// The largest of row[0, count) and its index (the lowest on ties), for
// thread 0 of a block of 1024 threads.
__device__ void blockArgmax(const float* row, int count, float* bestOut, int* indexOut) {
  __shared__ float bestValue[1024];
  __shared__ int bestIndex[1024];
  float value = -INFINITY;
  int index = 0;
  for (int j = threadIdx.x; j < count; j += blockDim.x)
    if (row[j] > value) value = row[j], index = j;
  bestValue[threadIdx.x] = value;
  bestIndex[threadIdx.x] = index;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      const int other = threadIdx.x + width;
      if (bestValue[other] > bestValue[threadIdx.x] ||
          (bestValue[other] == bestValue[threadIdx.x] && bestIndex[other] < bestIndex[threadIdx.x])) {
        bestValue[threadIdx.x] = bestValue[other];
        bestIndex[threadIdx.x] = bestIndex[other];
      }
    }
    __syncthreads();
  }
  *bestOut = bestValue[0];
  *indexOut = bestIndex[0];
}

__global__ void argmaxKernel(int* tokens, int* pos, const float* logits, int vocab, bool advance) {
  waitForPrevious();
  float value;
  int index;
  blockArgmax(logits + size_t(blockIdx.x) * vocab, vocab, &value, &index);
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = index;
    if (advance) pos[blockIdx.x] += 1;
  }
}

__global__ void argmaxKeyKernel(uint64_t* keys, const float* logits, int count, int offset) {
  waitForPrevious();
  float value;
  int index;
  blockArgmax(logits + size_t(blockIdx.x) * count, count, &value, &index);
  if (threadIdx.x == 0) keys[blockIdx.x] = argmaxKey(value, uint32_t(offset + index));
}

__global__ void tokensFromKeysKernel(int* tokens, int* pos, const uint64_t* keys, bool advance) {
  waitForPrevious();
  tokens[threadIdx.x] = argmaxKeyIndex(keys[threadIdx.x]);
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

int gridFor(size_t n, int block) { return int((n + block - 1) / block < 4096 ? (n + block - 1) / block : 4096); }

}  // namespace

cudaError_t launchEmbedding(DType t, float* x, const void* embedding, const int* tokens, int n, int dim, Launch on) {
  return ENGINE_DISPATCH(t, embeddingKernel, dim3(n), dim3(256), 0, on, x, static_cast<const T*>(embedding), tokens,
                         dim);
}

cudaError_t launchAddRmsNorm(DType t, void* out, float* x, const void* delta, const void* weight,
                             const int* rowIndex, int rows, int dim, float eps, Launch on) {
  return ENGINE_DISPATCH(t, addRmsNormKernel, dim3(rows), dim3(512), 0, on, static_cast<T*>(out), x,
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

cudaError_t launchArgmax(int* tokens, int* pos, const float* logits, int seqs, int vocab, bool advance, Launch on) {
  return launch(argmaxKernel, dim3(seqs), dim3(1024), 0, on, tokens, pos, logits, vocab, advance);
}

cudaError_t launchArgmaxKey(uint64_t* keys, const float* logits, int seqs, int count, int offset, Launch on) {
  return launch(argmaxKeyKernel, dim3(seqs), dim3(1024), 0, on, keys, logits, count, offset);
}

cudaError_t launchTokensFromKeys(int* tokens, int* pos, const uint64_t* keys, int seqs, bool advance, Launch on) {
  return launch(tokensFromKeysKernel, dim3(1), dim3(seqs), 0, on, tokens, pos, keys, advance);
}

cudaError_t launchRandomFill(DType t, void* data, size_t n, uint64_t seed, float scale, float offset, Launch on) {
  return ENGINE_DISPATCH(t, randomFillKernel, dim3(gridFor(n, 256)), dim3(256), 0, on, static_cast<T*>(data), n,
                         seed, scale, offset);
}

}  // namespace engine
