// Matrix-vector products for decode (gemv.h). One block stages the input
// vector(s) in shared memory, then each warp streams whole rows of W: its
// rows' 16-byte chunks form one sequence, and the next chunk is loaded while
// the current one is multiplied, so loads stay in flight across row ends.
// The first chunk is loaded before waiting for the previous kernel (weights
// never depend on it), so that wait hides behind HBM latency.
#include "gemv.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernel_common.cuh"

namespace engine {
namespace {

constexpr int kMaxTokens = 2;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLoads = 4;                // 16-byte loads per lane per chunk
constexpr int kChunkVectors = 32 * kLoads;  // 16-byte vectors of a row per chunk

// What a warp does with the dot products of one output.
enum class Epilogue {
  Plain,   // y[b][j] = W[j] . x[b]
  SwiGlu,  // y[b][j] = silu(W[j] . x[b]) * (W[j + pairRows] . x[b])
  Qkv      // a RoPE pair of q or k rows (or two v rows): QkvEpilogue
};

struct GemvParams {
  void* y;
  const uint4* w;     // row-major, `vectors` uint4 per row
  GemvInput input;
  int out, in, vectors;
  int pairRows;       // SwiGlu: the distance from a gate row to its up row
  int rowsPerWarp;    // outputs per warp
  QkvEpilogue qkv;    // Qkv only
};

__device__ inline float dot8(const uint4& w, const uint4& x) {
  const __nv_bfloat162* wh = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&x);
  float acc = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 a = __bfloat1622float2(wh[k]), b = __bfloat1622float2(xh[k]);
    acc += a.x * b.x + a.y * b.y;
  }
  return acc;
}

__device__ inline float warpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// This lane's share of one chunk of kRows rows.
template <int kRows>
struct Chunk {
  uint4 w[kRows][kLoads];

  __device__ void load(const GemvParams& p, const int (&rows)[kRows], int chunk, int lane) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint4* base = p.w + size_t(rows[r]) * p.vectors;
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int v = chunk * kChunkVectors + k * 32 + lane;
        w[r][k] = v < p.vectors ? __ldcs(base + v) : make_uint4(0, 0, 0, 0);
      }
    }
  }

  template <int kTokens>
  __device__ void accumulate(float (&acc)[kRows][kTokens], const uint4* xs, int chunk, int lane, int vectors) const {
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int v = chunk * kChunkVectors + k * 32 + lane;
      if (v >= vectors) break;
#pragma unroll
      for (int b = 0; b < kTokens; ++b) {
        const uint4 x = xs[b * vectors + v];
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][b] += dot8(w[r][k], x);
      }
    }
  }
};

// xs[b] = the input vector of token b, as bf16, for the whole block. The
// norm reads its inputs 4 values at a time and keeps residual + delta in
// shared memory (`staged`, fp32) between the sum of squares and the scaling:
// each thread's loads are issued together, one memory latency per pass.
template <int kTokens>
__device__ void stageInput(const GemvParams& p, uint4* xs) {
  const GemvInput& in = p.input;
  if (in.x) {
    const uint4* x = static_cast<const uint4*>(in.x);
    for (int i = threadIdx.x; i < kTokens * p.vectors; i += blockDim.x) xs[i] = x[i];
    __syncthreads();
    return;
  }
  float4* staged = reinterpret_cast<float4*>(xs + kTokens * p.vectors);
  const int groups = p.in / 4;
  const auto* weight = static_cast<const uint2*>(in.normWeight);
  for (int b = 0; b < kTokens; ++b) {
    const float4* residual = reinterpret_cast<const float4*>(in.residual + size_t(b) * p.in);
    const uint2* delta = in.delta ? static_cast<const uint2*>(in.delta) + size_t(b) * groups : nullptr;
    float4* residualOut = reinterpret_cast<float4*>(in.residualOut + size_t(b) * p.in);
    float squares = 0;
#pragma unroll 4
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      float4 v = residual[g];
      if (delta) {
        const float4 d = bf16x4ToFloat4(delta[g]);
        v = make_float4(v.x + d.x, v.y + d.y, v.z + d.z, v.w + d.w);
      }
      staged[g] = v;
      if (blockIdx.x == 0) residualOut[g] = v;
      squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float scale = rsqrtf(blockSum(squares) / p.in + in.eps);  // its barriers publish `staged`
    uint2* out = reinterpret_cast<uint2*>(xs + b * p.vectors);
#pragma unroll 4
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      const float4 v = staged[g];
      const float4 w = bf16x4ToFloat4(weight[g]);
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x * scale * w.x, v.y * scale * w.y);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z * scale * w.z, v.w * scale * w.w);
      out[g] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
    }
    __syncthreads();  // `staged` is rewritten for the next token
  }
}

// The weight rows behind output j.
template <Epilogue kEpilogue>
__device__ inline void rowsOf(const GemvParams& p, int j, int (&rows)[kEpilogue == Epilogue::Plain ? 1 : 2]) {
  if constexpr (kEpilogue == Epilogue::Plain) {
    rows[0] = j;
  } else if constexpr (kEpilogue == Epilogue::SwiGlu) {
    rows[0] = j, rows[1] = j + p.pairRows;
  } else {
    const AttentionShape& s = p.qkv.shape;
    const int half = s.headDim / 2, qkPairs = (s.heads + s.kvHeads) * half;
    if (j < qkPairs) {  // q heads, then k heads: the two rows one rotation mixes
      const int base = j / half * s.headDim, i = j % half;
      rows[0] = s.ropeInterleaved ? base + 2 * i : base + i;
      rows[1] = s.ropeInterleaved ? rows[0] + 1 : rows[0] + half;
    } else {  // v rows, two at a time
      rows[0] = (s.heads + s.kvHeads) * s.headDim + 2 * (j - qkPairs);
      rows[1] = rows[0] + 1;
    }
  }
}

// Output j of token b from its rows' dot products `sum`.
template <Epilogue kEpilogue, typename OutT>
__device__ void finish(const GemvParams& p, int j, int b, const int (&rows)[kEpilogue == Epilogue::Plain ? 1 : 2],
                       const float* sum) {
  if constexpr (kEpilogue == Epilogue::Plain) {
    static_cast<OutT*>(p.y)[size_t(b) * p.out + j] = fromFloat<OutT>(sum[0]);
  } else if constexpr (kEpilogue == Epilogue::SwiGlu) {
    static_cast<OutT*>(p.y)[size_t(b) * p.out + j] = fromFloat<OutT>(sum[0] / (1.0f + __expf(-sum[0])) * sum[1]);
  } else {
    const QkvEpilogue& e = p.qkv;
    const AttentionShape& s = e.shape;
    const int d = s.headDim, half = d / 2, qkPairs = (s.heads + s.kvHeads) * half, pos = e.place.pos[b];
    const auto* bias = static_cast<const __nv_bfloat16*>(e.bias);
    float x0 = sum[0], x1 = sum[1];
    if (bias) x0 += __bfloat162float(bias[rows[0]]), x1 += __bfloat162float(bias[rows[1]]);
    const int head = rows[0] / d;  // counting q, then k, then v heads
    if (j < qkPairs) {
      const int i = j % half;
      const float angle = pos * (s.ropeFreqs ? s.ropeFreqs[i] : powf(s.ropeTheta, -2.0f * i / d));
      float c, sn;
      sincosf(angle, &sn, &c);
      const float r0 = x0 * c - x1 * sn, r1 = x0 * sn + x1 * c;
      x0 = r0, x1 = r1;
    }
    __nv_bfloat16* out;  // where element 0 of this head goes
    if (head < s.heads) {  // q stays in the product's output, where attention reads it
      out = static_cast<__nv_bfloat16*>(p.y) + size_t(b) * (s.heads + 2 * s.kvHeads) * d + size_t(head) * d;
    } else {
      const bool isKey = head < s.heads + s.kvHeads;
      const int kvh = isKey ? head - s.heads : head - s.heads - s.kvHeads;
      const size_t cacheAt = ((size_t(e.place.seq[b]) * s.maxContext + pos) * s.kvHeads + kvh) * d;
      out = static_cast<__nv_bfloat16*>(isKey ? e.keyCache : e.valueCache) + cacheAt;
    }
    out[rows[0] - head * d] = __float2bfloat16(x0);
    out[rows[1] - head * d] = __float2bfloat16(x1);
  }
}

template <int kTokens, Epilogue kEpilogue, typename OutT>
__global__ void __launch_bounds__(kThreads) gemvKernel(GemvParams p) {
  constexpr int kRows = kEpilogue == Epilogue::Plain ? 1 : 2;
  extern __shared__ uint4 xs[];  // [kTokens][vectors] bf16, then (fused norm) fp32 staging [in]
  const int lane = threadIdx.x % 32;
  const int first = (blockIdx.x * kWarps + threadIdx.x / 32) * p.rowsPerWarp;
  const int outputs = max(0, min(p.out, first + p.rowsPerWarp) - first);
  const int chunksPerRow = (p.vectors + kChunkVectors - 1) / kChunkVectors;
  const int items = outputs * chunksPerRow;

  int rows[kRows], nextRows[kRows];
  Chunk<kRows> current;
  if (items > 0) {
    rowsOf<kEpilogue>(p, first, rows);
    current.load(p, rows, 0, lane);
  }
  waitForPrevious();
  stageInput<kTokens>(p, xs);

  float acc[kRows][kTokens] = {};
  for (int item = 0; item < items; ++item) {
    const int j = first + item / chunksPerRow, chunk = item % chunksPerRow;
    Chunk<kRows> next;
    if (item + 1 < items) {
      rowsOf<kEpilogue>(p, first + (item + 1) / chunksPerRow, nextRows);
      next.load(p, nextRows, (item + 1) % chunksPerRow, lane);
    }
    current.accumulate(acc, xs, chunk, lane, p.vectors);
    current = next;
    if (chunk == chunksPerRow - 1) {
#pragma unroll
      for (int b = 0; b < kTokens; ++b) {
        float sum[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) sum[r] = warpSum(acc[r][b]), acc[r][b] = 0;
        if (lane == 0) finish<kEpilogue, OutT>(p, j, b, rows, sum);
      }
    }
    if (item + 1 < items) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) rows[r] = nextRows[r];
    }
  }
}

// Shared memory of an instance of kTokens: its input rows as bf16, and the
// fused norm's fp32 staging.
size_t sharedBytes(int kTokens, int in, bool norm) { return size_t(kTokens) * in * 2 + (norm ? size_t(in) * 4 : 0); }

// How many warps of `kernel` fit on the current device at once with `smem`
// bytes of shared memory per block. Eager decode launches every GEMV each
// step, so the answer is kept per (kernel, device, smem) after the first ask.
cudaError_t residentWarps(const void* kernel, size_t smem, int* warps) {
  struct Known {
    const void* kernel;
    int device;
    size_t smem;
    int warps;
  };
  static std::mutex mutex;
  static std::vector<Known> known;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mutex);
  for (const Known& k : known) {
    if (k.kernel == kernel && k.device == device && k.smem == smem) {
      *warps = k.warps;
      return cudaSuccess;
    }
  }
  int sms = 0, perSm = 0;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, smem);
  if (e != cudaSuccess) return e;
  *warps = std::max(1, sms * perSm) * kWarps;
  known.push_back({kernel, device, smem, *warps});
  return cudaSuccess;
}

// Launches the instance for (tokens, epilogue, output type) with a grid of
// the blocks that fit at once, every warp taking the same number of outputs
// (no tail of half-idle SMs).
template <int kTokens, Epilogue kEpilogue, typename OutT>
cudaError_t launchInstance(GemvParams p, Launch on) {
  auto kernel = gemvKernel<kTokens, kEpilogue, OutT>;
  const size_t smem = sharedBytes(kTokens, p.in, p.input.x == nullptr);
  // One instance serves products of different sizes, and a captured graph
  // keeps its launches: the limit only ever goes up.
  static size_t allowed = 48 * 1024;
  if (smem > allowed) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    allowed = smem;
  }
  int warps = 0;
  cudaError_t e = residentWarps(reinterpret_cast<const void*>(kernel), smem, &warps);
  if (e != cudaSuccess) return e;
  p.rowsPerWarp = (p.out + warps - 1) / warps;
  const int busyWarps = (p.out + p.rowsPerWarp - 1) / p.rowsPerWarp;
  return launch(kernel, dim3((busyWarps + kWarps - 1) / kWarps), dim3(kThreads), smem, on, p);
}

GemvParams paramsFor(const GemvInput& input, void* y, const void* w, int out, int in, int pairRows) {
  GemvParams p{};
  p.y = y;
  p.w = static_cast<const uint4*>(w);
  p.input = input;
  p.out = out;
  p.in = in;
  p.vectors = in / 8;
  p.pairRows = pairRows;
  return p;
}

}  // namespace

// The input rows (and the norm's staging) must fit in a block's shared memory
// (227 KB on H100/H200, 200 KB allowed here).
bool gemvFits(int n, int in) {
  return n >= 1 && n <= kMaxTokens && in % 8 == 0 && sharedBytes(n, in, true) <= 200 * 1024;
}

cudaError_t launchGemv(const GemvInput& input, void* y, bool yIsFloat, const void* w, int n, int out, int in,
                       Launch on) {
  if (!gemvFits(n, in)) return cudaErrorInvalidValue;
  const GemvParams p = paramsFor(input, y, w, out, in, 0);
  using E = Epilogue;
  if (yIsFloat) return n == 1 ? launchInstance<1, E::Plain, float>(p, on) : launchInstance<2, E::Plain, float>(p, on);
  return n == 1 ? launchInstance<1, E::Plain, __nv_bfloat16>(p, on) : launchInstance<2, E::Plain, __nv_bfloat16>(p, on);
}

cudaError_t launchGemvSwiGlu(const GemvInput& input, void* act, const void* gateUp, int n, int hidden, int in,
                             Launch on) {
  if (!gemvFits(n, in)) return cudaErrorInvalidValue;
  const GemvParams p = paramsFor(input, act, gateUp, hidden, in, hidden);
  return n == 1 ? launchInstance<1, Epilogue::SwiGlu, __nv_bfloat16>(p, on)
                : launchInstance<2, Epilogue::SwiGlu, __nv_bfloat16>(p, on);
}

cudaError_t launchGemvQkv(const GemvInput& input, void* qkv, const void* w, const QkvEpilogue& epilogue, int n,
                          int in, Launch on) {
  const AttentionShape& s = epilogue.shape;
  if (!gemvFits(n, in) || s.headDim % 2 != 0) return cudaErrorInvalidValue;
  GemvParams p = paramsFor(input, qkv, w, (s.heads + 2 * s.kvHeads) * s.headDim / 2, in, 0);
  p.qkv = epilogue;
  return n == 1 ? launchInstance<1, Epilogue::Qkv, __nv_bfloat16>(p, on)
                : launchInstance<2, Epilogue::Qkv, __nv_bfloat16>(p, on);
}

}  // namespace engine
