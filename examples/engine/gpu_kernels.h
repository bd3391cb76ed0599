// SPDX-License-Identifier: BSD-3-Clause
// The engine's CUDA kernels, one launcher each. Activations and weights are
// stored in DType (fp32 or bf16); every kernel computes in fp32. The residual
// stream and the logits are always fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace engine {

enum class DType { F32, BF16 };
inline size_t dtypeSize(DType t) { return t == DType::F32 ? 4 : 2; }
inline const char* dtypeName(DType t) { return t == DType::F32 ? "f32" : "bf16"; }

// Where a kernel goes: its stream, and whether it may be scheduled while the
// previous kernel finishes (programmatic dependent launch). Every kernel
// waits for its predecessor before it touches an activation, so overlapping
// only hides launch latency and the first weight loads.
struct Launch {
  cudaStream_t stream;
  bool overlap;
};

// Where each of the n tokens of a forward pass sits: its sequence (KV-cache
// slot) and position. Device arrays, so a captured graph reads fresh values.
struct TokenPlacement {
  const int* tokens;
  int* pos;
  const int* seq;
};

// x[i][:] = embedding[tokens[i]][:]
cudaError_t launchEmbedding(DType t, float* x, const void* embedding, const int* tokens, int n, int dim,
                            Launch on);

// out[r][:] = in[rowIndex ? rowIndex[r] : r][:], rows of dim elements of DType t
// (the bf16 residual stream of --fused-norm from the embedding table, the
// last rows of a pass).
cudaError_t launchGatherRows(DType t, void* out, const void* in, const int* rowIndex, int rows, int dim, Launch on);

// Per row r: if delta, x[row] += delta[row]; out[r] = RMSNorm(x[row]) * weight, where
// row = rowIndex ? rowIndex[r] : r (the LM head normalises only the last token of each sequence).
// weight is read before the wait for the previous kernel, as the GEMVs read
// theirs (gemv.h): it must not be written by a kernel still running in front.
cudaError_t launchAddRmsNorm(DType t, void* out, float* x, const void* delta, const void* weight,
                             const int* rowIndex, int rows, int dim, float eps, Launch on);

struct AttentionShape {
  int heads, kvHeads, headDim;      // local to this rank
  int group, headStart, kvStart;    // kvHead(h) = (headStart + h) / group - kvStart
  int maxContext;                   // KV-cache rows per sequence
  float ropeTheta, normEps;
  bool ropeInterleaved;
  const float* ropeFreqs;           // device [headDim/2] inverse frequencies; null: ropeTheta^(-2i/headDim).
                                    // Read before the PDL wait, like weights: fixed once the model is made
};

// qkv holds [q | k | v] per token. Adds the bias [bq | bk | bv] (when given),
// applies q/k norm (when the norm weights are given) and RoPE to q in place,
// and writes k and v into the KV cache of this layer ([seq][maxContext][kvHeads][headDim]).
cudaError_t launchQkvToCache(DType t, void* qkv, void* keyCache, void* valueCache, const void* qkvBias,
                             const void* qNorm, const void* kNorm, TokenPlacement place, int n,
                             const AttentionShape& s, Launch on);

// out[i][h] = softmax(q . K[0..pos[i]] / sqrt(d)) V for each token i and local head h
// (headDim a multiple of 4, at most 256). With splits > 1 (at most
// kAttentionMaxSplits) each head's context is spread over that many blocks,
// merged within the launch. blocksPerSm (1 or 2) picks the kernel built for
// that many blocks on an SM (attentionBlocksPerSm in attention_plan.h).
cudaError_t launchAttention(DType t, void* out, const void* qkv, const void* keyCache, const void* valueCache,
                            TokenPlacement place, int n, int splits, int blocksPerSm, int prefetchRows,
                            const AttentionShape& s, Launch on);

// How many blocks of the attention build for blocksPerSm (1 or 2) fit on one
// SM of the current device with `sharedBytes` of dynamic shared memory each:
// what the build's registers and that memory allow (test_engine_kernels
// checks that build 2 holds two where attentionBlocksPerSm picks it).
cudaError_t attentionResidentBlocks(DType t, int blocksPerSm, size_t sharedBytes, int* blocks);

// out[i][j] = silu(gateUp[i][j]) * gateUp[i][hidden + j]
cudaError_t launchSwiGlu(DType t, void* out, const void* gateUp, int n, int hidden, Launch on);

// The argmax of each sequence's logits, in two launches. Per sequence b:
// launchArgmaxKey raises keys[b] to the key (argmax_key.h) of the largest of
// the `count` logits (global index offset + j, so that with the vocabulary
// split over ranks the maximum key over all ranks names the global argmax,
// the lowest index on ties); keys[b] must be 0 before it. Then
// launchTokensFromKeys sets tokens[b] to the index keys[b] names (with
// advance, pos[b] += 1) and keys[b] back to 0, and *nonFinite (unless null)
// to 1 when a winner is NaN or infinite (it is never cleared here).
cudaError_t launchArgmaxKey(uint64_t* keys, const float* logits, int seqs, int count, int offset, Launch on);
cudaError_t launchTokensFromKeys(int* tokens, int* pos, uint64_t* keys, int* nonFinite, int seqs, bool advance,
                                 Launch on);

// Fills n values with offset + scale * uniform[-1, 1) from a counter hash of seed.
cudaError_t launchRandomFill(DType t, void* data, size_t n, uint64_t seed, float scale, float offset,
                             Launch on);

}  // namespace engine
