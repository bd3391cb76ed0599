// What the two GEMV kernels (gemv.h) share: their parameters, the staging of
// a normed input in shared memory (the fused add + RMSNorm), the
// weight rows behind an output, the epilogues, and the host-side helpers
// that size a launch. gemv.cu holds the CUDA-core kernel for 1-2 tokens and
// the entry points; gemv_mma.cu the tensor-core kernel for 3-8 tokens.
#pragma once

#include "gemv.h"
#include "kernel_common.cuh"
#include "rocenante/device.cuh"

namespace engine {

// What a kernel does with the dot products of one output.
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
  QkvEpilogue qkv;    // Qkv only
  int rowsPerWarp;    // CUDA-core kernel: outputs per warp
  int tokens;         // n, 1..8 (both kernels; the rest below is the tensor-core kernel's)
  int stride;         // 16-byte vectors from one token's staged input to the next
  int tiles;          // 16-row tiles of W (16 outputs for Plain, 8 for the pairs)
  int splits;         // warps that share a tile, each a slice of its K (1, 2, 4, 8 or 16)
  bool put;           // Plain outputs go into the exchange's windows, not y
  bool gathered;      // the normed input's delta is the exchange's sum
  rcnDeviceComm exchange;

  __host__ __device__ bool exchanges() const { return put || gathered; }
};

// The device API's call number of this block, for a GEMV that puts or
// gathers (0 otherwise); taken after the wait for the previous kernel.
__device__ inline uint32_t exchangeCall(const GemvParams& p) {
  return p.exchanges() ? rcn_device::rcnDeviceCall(p.exchange) : 0;
}

constexpr int kGemvMaxTokens = 8;  // the tokens of one mma's n

// The most dynamic shared memory a GEMV block stages its inputs in (227 KB
// on H100/H200; some is left for the kernels' static arrays).
constexpr size_t kGemvMaxSharedBytes = 200 * 1024;

// Whether the tensor-core kernel (gemv_mma.cu) takes `tokens` tokens of
// `in` values: always for a plain input (never staged: each lane reads it
// from global memory); for the fused norm only when the rows and the fp32
// staging fit.
bool gemvMmaFits(int tokens, int in, bool norm);

// How many blocks of `threads` threads and `smem` bytes of shared memory fit
// on the current device at once; kept per (kernel, device, smem) after the
// first ask, since eager decode launches every GEMV each step.
cudaError_t gemvResidentBlocks(const void* kernel, int threads, size_t smem, int* blocks);

// Readies a launch of kernel instance kKernel with `smem` bytes of dynamic
// shared memory: raises its limit where needed, then the resident blocks.
template <auto kKernel>
cudaError_t gemvBlocksFor(int threads, size_t smem, int* blocks) {
  const cudaError_t e = allowKernelShared<kKernel>(smem);
  return e == cudaSuccess ? gemvResidentBlocks(reinterpret_cast<const void*>(kKernel), threads, smem, blocks) : e;
}

// The tensor-core kernel (gemv_mma.cu) for p.tokens = 3..8 (the callers'
// dispatch guarantees it); fills the launch fields of p (stride, tiles,
// splits). Instantiated for Plain (fp32 and bf16 out), SwiGlu and Qkv (bf16).
template <Epilogue kEpilogue, typename OutT>
cudaError_t launchGemvMma(GemvParams p, Launch on);

namespace {

// Every block's threads sum their v[i] (i < k) over the block, in a fixed order.
template <int k>
__device__ void blockSums(float (&v)[k]) {
  if constexpr (k == 1) {
    v[0] = blockSum(v[0]);
  } else {
    __shared__ float partials[32][k];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
#pragma unroll
    for (int i = 0; i < k; ++i)
      v[i] = warpSum(v[i]);
    __syncthreads();  // partials may still be read by a previous call
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < k; ++i) partials[warp][i] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < k; ++i) {
      v[i] = 0;
      for (int w = 0; w < warps; ++w) v[i] += partials[w][i];
    }
  }
}

constexpr int kExchangeGroups = 4;  // groups of 4 values one thread gathers at once

// staged[i * groups + g] = the exchange's sums of group g (4 values) of token
// first + i, for the (i, g) this thread reads in stageInput. The gathers of
// kExchangeGroups groups are in flight together. A failed gather leaves its
// sums unset, and the staging garbage: the wait recorded the communicator's
// error, which the engine reads after every sync (GpuAllReduce::checkPeers)
// and throws on, so no token from it is used.
template <int kPass>
__device__ void gatherDeltas(const GemvParams& p, uint32_t call, int first, int tokens, int groups,
                             float4* staged) {
  for (int i = 0; i < kPass && first + i < tokens; ++i) {
    for (int g0 = threadIdx.x; g0 < groups; g0 += kExchangeGroups * blockDim.x) {
      size_t index[kExchangeGroups];
      float4 sums[kExchangeGroups];
      int valid = 0;
#pragma unroll
      for (int k = 0; k < kExchangeGroups; ++k)
        if (g0 + k * int(blockDim.x) < groups) index[valid++] = size_t(first + i) * p.in + 4 * (g0 + k * blockDim.x);
      rcn_device::rcnDeviceGather4<kExchangeGroups>(p.exchange, call, index, sums, valid);
#pragma unroll
      for (int k = 0; k < kExchangeGroups; ++k)
        if (k < valid) staged[i * groups + g0 + k * blockDim.x] = sums[k];
    }
  }
}

// xs[b * stride + v] = vector v of token b's normed input, as bf16, for the
// whole block (b < tokens; a plain input is not staged). The norm reads its
// inputs 4 values at a time and keeps residual + delta in shared memory
// (`staged`, fp32, kPass rows of in) between the sum of squares and the
// scaling, kPass tokens a pass, each pass with one block reduction. The
// CUDA-core kernel takes one token a pass (its staging is one row), the
// tensor-core kernel all of them in one.
template <int kPass, bool kGather = false>
__device__ void stageInput(const GemvParams& p, int tokens, int stride, uint4* xs, uint32_t call = 0) {
  const GemvInput& in = p.input;
  float4* staged = reinterpret_cast<float4*>(xs + tokens * stride);  // the norm's, past the inputs
  constexpr int kUnroll = kPass == 1 ? 4 : 1;  // iterations of the first pass unrolled (registers)
  const int groups = p.in / 4;
  const auto* weight = static_cast<const uint2*>(in.normWeight);
  const auto* delta = static_cast<const uint2*>(in.delta);
  const bool gathered = kGather && p.gathered;
  for (int first = 0; first < tokens; first += kPass) {
    if constexpr (kGather) {  // no gather code at all in the other instances
      if (gathered) gatherDeltas<kPass>(p, call, first, tokens, groups, staged);
    }
    float squares[kPass] = {};
#pragma unroll kUnroll
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      float4 v[kPass];
      uint2 d[kPass];
#pragma unroll
      for (int i = 0; i < kPass; ++i) {
        const int b = first + i;
        if (b < tokens) v[i] = reinterpret_cast<const float4*>(in.residual + size_t(b) * p.in)[g];
        if (b < tokens && delta) d[i] = delta[size_t(b) * groups + g];
      }
#pragma unroll
      for (int i = 0; i < kPass; ++i) {
        const int b = first + i;
        if (b >= tokens) break;
        if (delta || gathered) {
          const float4 e = gathered ? staged[i * groups + g] : bf16x4ToFloat4(d[i]);
          v[i] = make_float4(v[i].x + e.x, v[i].y + e.y, v[i].z + e.z, v[i].w + e.w);
        }
        staged[i * groups + g] = v[i];
        if (blockIdx.x == 0) reinterpret_cast<float4*>(in.residualOut + size_t(b) * p.in)[g] = v[i];
        squares[i] += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
      }
    }
    blockSums(squares);  // its barriers publish `staged`
    float scale[kPass];
#pragma unroll
    for (int i = 0; i < kPass; ++i) scale[i] = rsqrtf(squares[i] / p.in + in.eps);
#pragma unroll 4  // the norm weight's loads issued together (shared memory does not alias them)
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      const float4 w = bf16x4ToFloat4(weight[g]);
#pragma unroll
      for (int i = 0; i < kPass; ++i) {
        const int b = first + i;
        if (b >= tokens) break;
        const float4 v = staged[i * groups + g];
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x * scale[i] * w.x, v.y * scale[i] * w.y);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z * scale[i] * w.z, v.w * scale[i] * w.w);
        reinterpret_cast<uint2*>(xs + b * stride)[g] =
            make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
      }
    }
    __syncthreads();  // `staged` is rewritten by the next pass (or reused by the caller)
  }
  if (gathered) rcn_device::rcnDeviceEndCall(p.exchange, call);  // after the barrier above: every gather is done
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

// Output j of token b from its rows' dot products `sum`. kExchange: the
// kernel may put its outputs into an exchange (the CUDA-core kernel only:
// in the tensor-core kernel the put's code spilled 4-20 bytes of registers,
// and the gathers in its staging 244).
template <Epilogue kEpilogue, typename OutT, bool kExchange = false>
__device__ void finish(const GemvParams& p, int j, int b, const int (&rows)[kEpilogue == Epilogue::Plain ? 1 : 2],
                       const float* sum, uint32_t call = 0) {
  if constexpr (kEpilogue == Epilogue::Plain) {
    if (kExchange && p.put) rcn_device::rcnDevicePut(p.exchange, call, size_t(b) * p.out + j, sum[0]);
    else static_cast<OutT*>(p.y)[size_t(b) * p.out + j] = fromFloat<OutT>(sum[0]);
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

}  // namespace
}  // namespace engine
