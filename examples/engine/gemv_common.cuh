// SPDX-License-Identifier: BSD-3-Clause
// What the two GEMV kernels (gemv.h) share: their parameters, the weight
// rows behind an output, the epilogues, and the host-side helpers that size
// a launch. gemv.cu holds the CUDA-core kernel for 1-2 tokens (with the
// fused add + RMSNorm in front) and the entry points; gemv_mma.cu the
// tensor-core kernel for 3-8 tokens (plain inputs only).
#pragma once

#include "attention_plan.h"
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
  int units, unitsPerWarp;  // CUDA-core kernel: units of rows (gemv.cu) in all; per warp (parts of units when split)
  int tokens;         // n, 1..8 (both kernels)
  // The tensor-core kernel's:
  int tiles;          // 16-row tiles of W (16 outputs for Plain, 8 for the pairs)
  int splits;         // warps that share a tile, each a slice of its K (1, 2, 4, 8 or 16)
  // The CUDA-core kernel's all-reduce (rocenante's device API): Plain
  // outputs go into the exchange's windows, and y gets their sum over the ranks.
  bool reduce;
  rcnDeviceComm exchange;
};

// The device API's call number of this block, for a GEMV that sums over the
// ranks (0 otherwise); taken after the wait for the previous kernel.
__device__ inline uint32_t exchangeCall(const GemvParams& p) {
  return p.reduce ? rcn_device::rcnDeviceCall(p.exchange) : 0;
}

constexpr int kGemvMaxTokens = 8;  // the tokens of one mma's n

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

// The tensor-core kernel (gemv_mma.cu) for p.tokens = 3..8, and the plain
// products of 1-2 that gemv.cu hands on, a plain input always (the callers'
// dispatch guarantees both); fills the launch fields of
// p (tiles, splits). Instantiated for Plain (fp32 and bf16 out), SwiGlu and Qkv (bf16).
template <Epilogue kEpilogue, typename OutT>
cudaError_t launchGemvMma(GemvParams p, Launch on);

namespace {

// The two weight rows behind output j of a paired epilogue (each kernel
// lays out its plain rows itself).
template <Epilogue kEpilogue>
__device__ inline void rowsOf(const GemvParams& p, int j, int (&rows)[2]) {
  static_assert(kEpilogue != Epilogue::Plain, "a plain output has one row");
  if constexpr (kEpilogue == Epilogue::SwiGlu) {
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

// What the QKV epilogue reads besides its sums, in shared memory, read
// before the products rather than at the end of each row, where the whole
// warp would wait on it: the RoPE inverse frequencies, filled before the
// wait since they are fixed when the model is made, and each token's
// position and sequence, after it (the previous step's last kernel advances
// them). One barrier, storeQkvTokens', publishes both.
struct QkvShared {
  float freqs[kAttentionMaxHeadDim / 2];
  int pos[kGemvMaxTokens], seq[kGemvMaxTokens];
};

template <Epilogue kEpilogue>
__device__ void stageRopeFreqs(const GemvParams& p, QkvShared& q) {
  if constexpr (kEpilogue == Epilogue::Qkv) {
    for (int i = threadIdx.x; i < p.qkv.shape.headDim / 2; i += blockDim.x)
      q.freqs[i] = ropeInverseFrequency(p.qkv.shape, i);
  }
}

// Token threadIdx.x's position and sequence, in the registers of the
// threads below p.tokens, loaded right after the wait. The CUDA-core kernel
// stores them (storeQkvTokens) once it has issued its input loads, so that
// the two round trips overlap (a store of a loaded value waits for the
// load); the tensor-core kernel stores them first (gemv_mma.cu says why).
struct QkvToken {
  int pos = 0, seq = 0;
};

template <Epilogue kEpilogue>
__device__ QkvToken loadQkvToken(const GemvParams& p) {
  QkvToken token;
  if (kEpilogue == Epilogue::Qkv && threadIdx.x < p.tokens)
    token.pos = p.qkv.place.pos[threadIdx.x], token.seq = p.qkv.place.seq[threadIdx.x];
  return token;
}

// Then the barrier (uniform over the block).
template <Epilogue kEpilogue>
__device__ void storeQkvTokens(const GemvParams& p, const QkvToken& token, QkvShared& q) {
  if constexpr (kEpilogue == Epilogue::Qkv) {
    if (threadIdx.x < p.tokens) q.pos[threadIdx.x] = token.pos, q.seq[threadIdx.x] = token.seq;
    __syncthreads();
  }
}

// Output j of token b from its rows' dot products `sum` (QKV: with `q`). kExchange: the
// kernel may put its outputs into an exchange, to be summed over the ranks
// (the CUDA-core kernel only: in the tensor-core kernel the put's code
// spilled 4-20 bytes of registers).
template <Epilogue kEpilogue, typename OutT, bool kExchange = false>
__device__ void finish(const GemvParams& p, int j, int b, const int (&rows)[kEpilogue == Epilogue::Plain ? 1 : 2],
                       const float* sum, const QkvShared& q, uint32_t call = 0) {
  if constexpr (kEpilogue == Epilogue::Plain) {
    if (kExchange && p.reduce) rcn_device::rcnDevicePut(p.exchange, call, size_t(b) * p.out + j, sum[0]);
    else static_cast<OutT*>(p.y)[size_t(b) * p.out + j] = fromFloat<OutT>(sum[0]);
  } else if constexpr (kEpilogue == Epilogue::SwiGlu) {
    static_cast<OutT*>(p.y)[size_t(b) * p.out + j] = fromFloat<OutT>(sum[0] / (1.0f + __expf(-sum[0])) * sum[1]);
  } else {
    const QkvEpilogue& e = p.qkv;
    const AttentionShape& s = e.shape;
    const int d = s.headDim, half = d / 2, qkPairs = (s.heads + s.kvHeads) * half, pos = q.pos[b];
    const auto* bias = static_cast<const __nv_bfloat16*>(e.bias);
    float x0 = sum[0], x1 = sum[1];
    if (bias) x0 += __bfloat162float(bias[rows[0]]), x1 += __bfloat162float(bias[rows[1]]);
    const int head = rows[0] / d;  // counting q, then k, then v heads
    if (j < qkPairs) {
      const int i = j % half;
      const float angle = pos * q.freqs[i];
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
      const size_t cacheAt = ((size_t(q.seq[b]) * s.maxContext + pos) * s.kvHeads + kvh) * d;
      out = static_cast<__nv_bfloat16*>(isKey ? e.keyCache : e.valueCache) + cacheAt;
    }
    out[rows[0] - head * d] = __float2bfloat16(x0);
    out[rows[1] - head * d] = __float2bfloat16(x1);
  }
}

}  // namespace
}  // namespace engine
