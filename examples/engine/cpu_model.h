// SPDX-License-Identifier: BSD-3-Clause
// The float32 CPU reference of the forward pass, one token at a time, for
// one tensor-parallel rank (TP = 1 is the whole model). It reads top to
// bottom like llama2.c's run.c: embedding, then per layer RMSNorm, Q/K/V,
// (q/k norm), RoPE, KV cache, attention, O + all-reduce, RMSNorm, SwiGLU MLP,
// down + all-reduce; then the final norm and the LM head.
#pragma once

#include <thread>
#include <vector>

#include "allreduce_hook.h"
#include "model.h"
#include "shard.h"

namespace engine {

class CpuModel {
 public:
  // `weights` are this rank's shard (shardWeights(full, layout)).
  CpuModel(ModelWeights weights, const ShardLayout& layout, AllReduceHook* allReduce);

  // Runs `token` at position `pos` (0-based, < seqLen), appending to the KV
  // cache, and returns the logits over the full vocabulary.
  const std::vector<float>& forward(int token, int pos);

  const ModelConfig& config() const { return w_.config; }

 private:
  void attention(int layer, int pos);
  void mlp(int layer);

  ModelWeights w_;
  ShardLayout layout_;
  AllReduceHook* allReduce_;
  std::vector<float> ropeFreqs_;  // [headDim/2]
  std::vector<float> x_, xb_, q_, k_, v_, att_, scores_, out_, gate_, up_, logits_;
  std::vector<std::vector<float>> keyCache_, valueCache_;  // [layer][pos][kvHeads*headDim]
};

// TP = N on the CPU inside one process: N CpuModels on N threads, joined by
// a LocalAllReduce. Produces the same logits as TP = 1 up to fp32 rounding.
// forward rethrows a rank's error; the ranks are then out of step, and every
// later forward throws (make a new model).
class CpuTpModel {
 public:
  CpuTpModel(const ModelWeights& full, int tp);
  const std::vector<float>& forward(int token, int pos);
  const ModelConfig& config() const { return ranks_[0].config(); }

 private:
  LocalAllReduce allReduce_;
  std::vector<CpuModel> ranks_;
};

// y[out] = W[out][in] x[in]
void matvec(float* y, const float* W, const float* x, int out, int in);
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
// Rotates one head in place for position pos; pair i turns by pos * invFreq[i]
// (ropeInverseFrequencies()).
void rope(float* head, int headDim, int pos, const float* invFreq, bool interleaved);
// Adds bias[i] to x[i] for i < n; nothing when bias is empty (no qkv_bias).
void addBias(float* x, const std::vector<float>& bias, int n);

}  // namespace engine
