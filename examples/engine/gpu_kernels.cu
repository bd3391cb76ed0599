// One kernel per step of the forward pass, each instantiated for fp32 and
// bf16 storage only. Reductions use a fixed order (warp shuffles, then one
// warp over the partials), so every GPU computes bit-identical results.
#include "gpu_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>

namespace engine {
namespace {

__device__ inline float toFloat(float v) { return v; }
__device__ inline float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ inline T fromFloat(float v);
template <>
__device__ inline float fromFloat<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// Sum over the block (blockDim.x a multiple of 32). Every thread gets the total.
__device__ float blockSum(float v) {
  __shared__ float partials[32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partials may still be read by a previous call
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < int(blockDim.x / 32) ? partials[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) w += __shfl_xor_sync(0xffffffffu, w, offset);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

__device__ float blockMax(float v) {
  __shared__ float partials[32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < int(blockDim.x / 32) ? partials[lane] : -INFINITY;
    for (int offset = 16; offset > 0; offset >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, offset));
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void embeddingKernel(float* x, const T* table, const int* tokens, int dim) {
  const T* row = table + size_t(tokens[blockIdx.x]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) x[size_t(blockIdx.x) * dim + i] = toFloat(row[i]);
}

template <typename T>
__global__ void addRmsNormKernel(T* out, float* x, const T* delta, const T* weight, const int* rowIndex,
                                 int dim, float eps) {
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

// Block (head, token, split), 512 threads. Split z covers the cached
// positions [z * chunk, (z + 1) * chunk) up to the token's own position; with
// one split the block writes the output, with several it writes its running
// max, exp-sum and unnormalised sum (flash-decoding) and combineKernel merges
// them. Scores live in shared memory. Decode is latency-bound, so each warp
// works on kUnroll positions at once, with clamped indices so that the loads
// never sit behind a branch.
constexpr int kAttentionThreads = 512;
constexpr int kUnroll = 8;
constexpr int kMaxSplits = 16;

template <typename T>
__global__ void __launch_bounds__(kAttentionThreads) attentionKernel(T* out, float* partials, const T* qkv,
                                                                     const T* keyCache, const T* valueCache,
                                                                     TokenPlacement place, AttentionShape s,
                                                                     int chunk) {
  extern __shared__ float shared[];
  const int d = s.headDim, i = blockIdx.y, h = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
  float* q = shared;                  // [d]
  float* scores = q + d;              // [chunk]
  float* partial = scores + chunk;    // [groups][d]
  const int kvh = (s.headStart + h) / s.group - s.kvStart;
  const int begin = split * chunk, last = min(place.pos[i], begin + chunk - 1);
  float* mine = partials + ((size_t(i) * s.heads + h) * splits + split) * (d + 2);  // [max, sum, acc[d]]
  if (begin > last) {  // the whole split lies beyond this token's position
    for (int j = threadIdx.x; j < d + 2; j += blockDim.x) mine[j] = j == 0 ? -INFINITY : 0.0f;
    return;
  }
  const size_t stride = size_t(s.heads + 2 * s.kvHeads) * d;
  const size_t rowStride = size_t(s.kvHeads) * d;
  const T* keys = keyCache + size_t(place.seq[i]) * s.maxContext * rowStride + size_t(kvh) * d;
  const T* values = valueCache + size_t(place.seq[i]) * s.maxContext * rowStride + size_t(kvh) * d;

  for (int j = threadIdx.x; j < d; j += blockDim.x) q[j] = toFloat(qkv[i * stride + size_t(h) * d + j]);
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const float scale = rsqrtf(float(d));
  for (int t0 = begin + warp; t0 <= last; t0 += warps * kUnroll) {
    float dot[kUnroll] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const T* k = keys + min(t0 + u * warps, last) * rowStride;
      for (int j = lane; j < d; j += 32) dot[u] += q[j] * toFloat(k[j]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      for (int offset = 16; offset > 0; offset >>= 1) dot[u] += __shfl_xor_sync(0xffffffffu, dot[u], offset);
      if (lane == 0 && t0 + u * warps <= last) scores[t0 + u * warps - begin] = dot[u] * scale;
    }
  }
  __syncthreads();
  const int count = last - begin + 1;
  float localMax = -INFINITY;
  for (int t = threadIdx.x; t < count; t += blockDim.x) localMax = fmaxf(localMax, scores[t]);
  const float maxScore = blockMax(localMax);
  float localSum = 0;
  for (int t = threadIdx.x; t < count; t += blockDim.x) localSum += scores[t] = __expf(scores[t] - maxScore);
  const float total = blockSum(localSum);  // also orders the score writes before the reads below

  // Thread groups of d threads split the positions; group g takes t = g, g + groups, ...
  const int groups = blockDim.x / d, group = threadIdx.x / d, j = threadIdx.x % d;
  if (group < groups) {
    float acc = 0;
    for (int t0 = group; t0 < count; t0 += groups * kUnroll) {
      float v[kUnroll], p[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int t = min(t0 + u * groups, count - 1);
        v[u] = toFloat(values[(begin + t) * rowStride + j]);
        p[u] = t0 + u * groups < count ? scores[t] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc += p[u] * v[u];
    }
    partial[group * d + j] = acc;
  }
  __syncthreads();
  for (int jj = threadIdx.x; jj < d; jj += blockDim.x) {
    float acc = 0;
    for (int g = 0; g < groups; ++g) acc += partial[g * d + jj];
    if (splits == 1) {
      out[(size_t(i) * s.heads + h) * d + jj] = fromFloat<T>(acc / total);
    } else {
      mine[2 + jj] = acc;
      if (jj == 0) mine[0] = maxScore, mine[1] = total;
    }
  }
}

// Block (head, token): merges the splits of attentionKernel in split order.
template <typename T>
__global__ void combineKernel(T* out, const float* partials, int heads, int d, int splits) {
  const int i = blockIdx.y, h = blockIdx.x;
  const float* parts = partials + (size_t(i) * heads + h) * splits * (d + 2);
  float maxScore = -INFINITY;
  for (int z = 0; z < splits; ++z) maxScore = fmaxf(maxScore, parts[z * (d + 2)]);
  float total = 0;
  for (int z = 0; z < splits; ++z)
    if (parts[z * (d + 2) + 1] > 0) total += parts[z * (d + 2) + 1] * __expf(parts[z * (d + 2)] - maxScore);
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0;
    for (int z = 0; z < splits; ++z)
      if (parts[z * (d + 2) + 1] > 0) acc += parts[z * (d + 2) + 2 + j] * __expf(parts[z * (d + 2)] - maxScore);
    out[(size_t(i) * heads + h) * d + j] = fromFloat<T>(acc / total);
  }
}

template <typename T>
__global__ void swiGluKernel(T* out, const T* gateUp, int hidden) {
  const size_t row = blockIdx.y;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < hidden; j += gridDim.x * blockDim.x) {
    const float g = toFloat(gateUp[row * 2 * hidden + j]), u = toFloat(gateUp[row * 2 * hidden + hidden + j]);
    out[row * hidden + j] = fromFloat<T>(g / (1.0f + __expf(-g)) * u);
  }
}

__global__ void argmaxKernel(int* tokens, int* pos, const float* logits, int vocab, bool advance) {
  __shared__ float bestValue[1024];
  __shared__ int bestIndex[1024];
  const float* row = logits + size_t(blockIdx.x) * vocab;
  float value = -INFINITY;
  int index = 0;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x)
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
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = bestIndex[0];
    if (advance) pos[blockIdx.x] += 1;
  }
}

// y[b][row] = W[row] . x[b] for up to kGemvMaxTokens tokens, bf16 weights.
// Decode GEMMs are matrix-vector products bound by reading W once: one warp
// per row, 16-byte loads, every token's accumulator kept in registers.
// Measured on H200: a little faster than cuBLAS for 1 token, much slower
// for 8 (the activations are re-read per row), so it stops at 2.
constexpr int kGemvMaxTokens = 2;
constexpr int kGemvWarps = 8;

__device__ inline void unpackBf16x8(const uint4& v, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 pair = __bfloat1622float2(h[k]);
    f[2 * k] = pair.x;
    f[2 * k + 1] = pair.y;
  }
}

template <typename OutT>
__global__ void __launch_bounds__(kGemvWarps * 32) gemvBf16Kernel(OutT* y, const __nv_bfloat16* W,
                                                                  const __nv_bfloat16* x, int n, int out, int in) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  if (row >= out) return;
  const uint4* w = reinterpret_cast<const uint4*>(W + size_t(row) * in);
  const uint4* xs = reinterpret_cast<const uint4*>(x);
  const int vectors = in / 8;
  float acc[kGemvMaxTokens] = {};
#pragma unroll 4
  for (int v = lane; v < vectors; v += 32) {
    float wf[8];
    unpackBf16x8(__ldcs(w + v), wf);  // weights are read once: do not keep them in cache
#pragma unroll
    for (int b = 0; b < kGemvMaxTokens; ++b) {
      if (b >= n) break;
      float xf[8];
      unpackBf16x8(xs[size_t(b) * vectors + v], xf);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[b] += wf[k] * xf[k];
    }
  }
#pragma unroll
  for (int b = 0; b < kGemvMaxTokens; ++b) {
    if (b >= n) break;
    float sum = acc[b];
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[size_t(b) * out + row] = fromFloat<OutT>(sum);
  }
}

template <typename T>
__global__ void randomFillKernel(T* data, size_t n, uint64_t seed, float scale, float offset) {
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

#define ENGINE_DISPATCH(t, KERNEL, GRID, BLOCK, SMEM, STREAM, ...)                         \
  do {                                                                                    \
    if ((t) == DType::F32) {                                                              \
      using T = float;                                                                    \
      KERNEL<T><<<GRID, BLOCK, SMEM, STREAM>>>(__VA_ARGS__);                              \
    } else {                                                                              \
      using T = __nv_bfloat16;                                                            \
      KERNEL<T><<<GRID, BLOCK, SMEM, STREAM>>>(__VA_ARGS__);                              \
    }                                                                                     \
  } while (0)

cudaError_t launchEmbedding(DType t, float* x, const void* embedding, const int* tokens, int n, int dim,
                            cudaStream_t stream) {
  ENGINE_DISPATCH(t, embeddingKernel, n, 256, 0, stream, x, static_cast<const T*>(embedding), tokens, dim);
  return cudaGetLastError();
}

cudaError_t launchAddRmsNorm(DType t, void* out, float* x, const void* delta, const void* weight,
                             const int* rowIndex, int rows, int dim, float eps, cudaStream_t stream) {
  ENGINE_DISPATCH(t, addRmsNormKernel, rows, 512, 0, stream, static_cast<T*>(out), x,
                  static_cast<const T*>(delta), static_cast<const T*>(weight), rowIndex, dim, eps);
  return cudaGetLastError();
}

cudaError_t launchQkvToCache(DType t, void* qkv, void* keyCache, void* valueCache, const void* qkvBias,
                             const void* qNorm, const void* kNorm, TokenPlacement place, int n,
                             const AttentionShape& s, cudaStream_t stream) {
  dim3 grid(s.heads + s.kvHeads, n);
  ENGINE_DISPATCH(t, qkvToCacheKernel, grid, 64, 0, stream, static_cast<T*>(qkv), static_cast<T*>(keyCache),
                  static_cast<T*>(valueCache), static_cast<const T*>(qkvBias), static_cast<const T*>(qNorm),
                  static_cast<const T*>(kNorm), place, s);
  return cudaGetLastError();
}

int attentionSplits(int maxContext, int blocks) {
  // Only worth it while one block per head leaves SMs idle (measured on H200:
  // batch 1 gains, batch 8 x 32 heads lost ~15 us a layer with splits).
  if (blocks >= 128) return 1;
  return std::max(1, std::min(kMaxSplits, (maxContext + 63) / 64));  // about 64 positions a block
}

size_t attentionScratchFloats(int tokens, const AttentionShape& s) {
  return size_t(tokens) * s.heads * kMaxSplits * (s.headDim + 2);
}

cudaError_t launchAttention(DType t, void* out, float* scratch, const void* qkv, const void* keyCache,
                            const void* valueCache, TokenPlacement place, int n, int splits, const AttentionShape& s,
                            cudaStream_t stream) {
  const int block = kAttentionThreads;
  if (s.headDim > 256 || splits < 1 || splits > kMaxSplits) return cudaErrorInvalidValue;
  const int chunk = (s.maxContext + splits - 1) / splits;
  const size_t smem = (s.headDim + chunk + (block / s.headDim) * s.headDim) * sizeof(float);
  dim3 grid(s.heads, n, splits);
  if (smem > 48 * 1024) {
    cudaError_t e = t == DType::F32
        ? cudaFuncSetAttribute(attentionKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem))
        : cudaFuncSetAttribute(attentionKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  ENGINE_DISPATCH(t, attentionKernel, grid, block, smem, stream, static_cast<T*>(out), scratch,
                  static_cast<const T*>(qkv), static_cast<const T*>(keyCache), static_cast<const T*>(valueCache),
                  place, s, chunk);
  if (splits > 1) {
    const int threads = (s.headDim + 31) / 32 * 32;
    ENGINE_DISPATCH(t, combineKernel, dim3(s.heads, n), threads, 0, stream, static_cast<T*>(out), scratch, s.heads,
                    s.headDim, splits);
  }
  return cudaGetLastError();
}

cudaError_t launchSwiGlu(DType t, void* out, const void* gateUp, int n, int hidden, cudaStream_t stream) {
  dim3 grid((hidden + 255) / 256, n);
  ENGINE_DISPATCH(t, swiGluKernel, grid, 256, 0, stream, static_cast<T*>(out), static_cast<const T*>(gateUp), hidden);
  return cudaGetLastError();
}

cudaError_t launchArgmax(int* tokens, int* pos, const float* logits, int seqs, int vocab, bool advance,
                         cudaStream_t stream) {
  argmaxKernel<<<seqs, 1024, 0, stream>>>(tokens, pos, logits, vocab, advance);
  return cudaGetLastError();
}

bool gemvFits(int n, int in) { return n >= 1 && n <= kGemvMaxTokens && in % 8 == 0; }

cudaError_t launchGemvBf16(void* y, bool yIsFloat, const void* w, const void* x, int n, int out, int in,
                           cudaStream_t stream) {
  if (!gemvFits(n, in)) return cudaErrorInvalidValue;
  const int blocks = (out + kGemvWarps - 1) / kGemvWarps;
  const auto* wb = static_cast<const __nv_bfloat16*>(w);
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  if (yIsFloat)
    gemvBf16Kernel<float><<<blocks, kGemvWarps * 32, 0, stream>>>(static_cast<float*>(y), wb, xb, n, out, in);
  else
    gemvBf16Kernel<__nv_bfloat16><<<blocks, kGemvWarps * 32, 0, stream>>>(static_cast<__nv_bfloat16*>(y), wb, xb,
                                                                          n, out, in);
  return cudaGetLastError();
}

cudaError_t launchRandomFill(DType t, void* data, size_t n, uint64_t seed, float scale, float offset,
                             cudaStream_t stream) {
  ENGINE_DISPATCH(t, randomFillKernel, gridFor(n, 256), 256, 0, stream, static_cast<T*>(data), n, seed, scale, offset);
  return cudaGetLastError();
}

}  // namespace engine
