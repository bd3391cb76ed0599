// SPDX-License-Identifier: BSD-3-Clause
// The decode path's matrix products: y[b] = W x[b] for up to 8 tokens with
// bf16 weights. Bound by reading W once, so each kernel streams W with many
// loads in flight. 1-2 tokens run on CUDA cores (gemv.cu), 3-8 on tensor
// cores (gemv_mma.cu: mma.sync with the tokens as the 8 columns), and so do
// plain products of 2 tokens, and of one whose rows would leave many
// CUDA-core warps idle (gemv.cu, launchPlain, kMinBusyShare). The input is
// either a bf16 vector or, for 1-2 tokens, the residual stream normalised
// on the fly (the add + RMSNorm that precedes the QKV and gate/up products,
// fused in).
// A GEMV loads its first weights (a normed one the start of its norm
// weight, a QKV product its RoPE table) before it waits for the previous
// kernel (programmatic dependent launch), so they must not be written by a
// kernel still running in front of it: load them with plain launches and
// synchronize, as GpuModel does.
#pragma once

#include "gpu_kernels.h"
#include "rocenante/rocenante.h"

namespace engine {

// True when the GEMV kernels take this product: 1-8 tokens, in % 8 == 0,
// and, when `norm` (the input is the residual stream, normalised on the fly),
// 1-2 tokens whose input rows and the norm's fp32 staging fit in shared
// memory: in <= 34128 for 1 token, 25600 for 2 (3-8 tokens take plain inputs
// only: the caller runs the norm first). A plain input is read from global
// memory, not staged, so any size fits.
bool gemvFits(int n, int in, bool norm = true);

// The input vector of every token: x, or, when x is null,
// RMSNorm(residual + delta) * normWeight, with residual + delta also written
// to residualOut (a different buffer from residual: every block reads residual).
struct GemvInput {
  const void* x = nullptr;           // bf16 [n][in]
  const float* residual = nullptr;   // fp32 [n][in]
  const void* delta = nullptr;       // bf16 [n][in], or null
  const void* normWeight = nullptr;  // bf16 [in]
  float* residualOut = nullptr;      // fp32 [n][in]
  float eps = 0;

  bool normed() const { return x == nullptr; }
};

inline GemvInput vectorInput(const void* x) {
  GemvInput input;
  input.x = x;
  return input;
}

inline GemvInput normedInput(const float* residual, const void* delta, const void* normWeight, float* residualOut,
                             float eps) {
  GemvInput input;
  input.residual = residual;
  input.delta = delta;
  input.normWeight = normWeight;
  input.residualOut = residualOut;
  input.eps = eps;
  return input;
}

// The most tokens a product may sum over the ranks (launchGemv's sumWith):
// the CUDA-core kernel's (the exchange's code spilled registers in the
// tensor-core kernel: gemv_common.cuh, finish).
constexpr int kGemvExchangeMaxTokens = 2;

// y[b][row] = W[row] . input[b] for row < out; y is fp32 when yIsFloat, else
// bf16. With sumWith (rocenante's device API, rocenante/device.cuh), y is
// the sum over the ranks of every rank's product, the all-reduce fused in:
// each output goes into every rank's window as fp32, and the warp that
// computed the first output of a group of 4 adds the group's values up over
// the ranks in rank order and writes the bf16 sums, the same bits on every
// rank. Only bf16 outputs of a plain input, 1-2 tokens, out % 4 == 0, n * out
// within the window, and y 8-byte aligned (as cudaMalloc's are).
cudaError_t launchGemv(const GemvInput& input, void* y, bool yIsFloat, const void* w, int n, int out, int in,
                       Launch on, const rcnDeviceComm* sumWith = nullptr);

// act[b][j] = silu(gateUp[j] . input[b]) * (gateUp[hidden + j] . input[b]) for
// j < hidden: the gate/up product and SwiGLU in one pass, bf16 out.
cudaError_t launchGemvSwiGlu(const GemvInput& input, void* act, const void* gateUp, int n, int hidden, int in,
                             Launch on);

// The QKV product with its epilogue fused (for models without q/k norm,
// which needs a whole head first): per token, the q/k/v biases (when
// given), RoPE on q and k, q written to qkv (its usual place in [q | k | v]
// rows), k and v into this layer's KV cache, as launchQkvToCache would.
// Heads of at most kAttentionMaxHeadDim; the RoPE table (shape.ropeFreqs)
// is read before the PDL wait, like the weights.
struct QkvEpilogue {
  TokenPlacement place;
  AttentionShape shape;
  const void* bias = nullptr;  // bf16 [q | k | v] or null
  void* keyCache = nullptr;
  void* valueCache = nullptr;
};

cudaError_t launchGemvQkv(const GemvInput& input, void* qkv, const void* w, const QkvEpilogue& epilogue, int n,
                          int in, Launch on);

}  // namespace engine
