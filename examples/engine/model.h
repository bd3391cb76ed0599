// SPDX-License-Identifier: BSD-3-Clause
// The model as the engine sees it: a shape (ModelConfig) and float32 weights
// in the y = W x convention, each matrix row-major [out_features][in_features].
// Every loader (llama2.c, random) produces this; the CPU and GPU paths consume it.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace engine {

// Every loader and shape error is reported as this, with a message that names
// the file, the field or the number that is wrong.
struct EngineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ModelConfig {
  std::string arch = "llama";  // llama, qwen2, qwen3, mistral (only changes the flags below)
  int dim = 0;                 // hidden size
  int hidden = 0;              // MLP intermediate size
  int layers = 0;
  int heads = 0;               // query heads
  int kvHeads = 0;             // key/value heads (grouped-query attention when < heads)
  int headDim = 0;
  int vocab = 0;
  int seqLen = 0;              // longest context the KV cache holds
  float normEps = 1e-5f;
  float ropeTheta = 10000.0f;
  // RoPE's inverse frequency for each of the headDim/2 rotation pairs, when
  // the checkpoint rescales them (Llama 3.1/3.2 "llama3", "linear"); empty:
  // the plain ropeTheta^(-2i/headDim).
  std::vector<float> ropeFreqs;
  bool ropeInterleaved = true;  // llama2.c rotates (x[2i], x[2i+1]); HF rotates (x[i], x[i+d/2])
  bool qkNorm = false;          // Qwen3: RMSNorm over each q and k head before RoPE
  bool qkvBias = false;         // Qwen2: biases added after the Q/K/V products
  bool tiedClassifier = true;   // the LM head is the token embedding
};

struct LayerWeights {
  std::vector<float> attnNorm;  // [dim]
  std::vector<float> wq;        // [heads*headDim][dim]
  std::vector<float> wk;        // [kvHeads*headDim][dim]
  std::vector<float> wv;        // [kvHeads*headDim][dim]
  std::vector<float> wo;        // [dim][heads*headDim]
  std::vector<float> ffnNorm;   // [dim]
  std::vector<float> wGate;     // [hidden][dim]   (llama2.c w1)
  std::vector<float> wDown;     // [dim][hidden]   (llama2.c w2)
  std::vector<float> wUp;       // [hidden][dim]   (llama2.c w3)
  std::vector<float> qNorm;     // [headDim], only with qkNorm
  std::vector<float> kNorm;     // [headDim], only with qkNorm
  std::vector<float> bq;        // [heads*headDim], only with qkvBias
  std::vector<float> bk;        // [kvHeads*headDim], only with qkvBias
  std::vector<float> bv;        // [kvHeads*headDim], only with qkvBias
};

struct ModelWeights {
  ModelConfig config;
  std::vector<float> embedding;   // [vocab][dim]
  std::vector<LayerWeights> layers;
  std::vector<float> finalNorm;   // [dim]
  std::vector<float> classifier;  // [vocab][dim]; empty when tied to the embedding

  const std::vector<float>& lmHead() const { return config.tiedClassifier ? embedding : classifier; }
};

// Throws EngineError when the shape is inconsistent (zero sizes, heads not a
// multiple of kvHeads, odd head size for RoPE, a frequency table of the wrong size).
constexpr int kMaxHeadDim = 4096;  // validateConfig's bound on head_dim
void validateConfig(const ModelConfig& config);

// The inverse frequency of each RoPE pair: config.ropeFreqs, or theta^(-2i/headDim).
std::vector<float> ropeInverseFrequencies(const ModelConfig& config);

std::string describeConfig(const ModelConfig& config);

// Throws EngineError("<where> holds nan ...") at the first NaN or infinity
// among weights just read: a corrupt checkpoint would otherwise only show as
// garbage text.
void requireFinite(const std::vector<float>& values, const std::string& where);
// The index of the first NaN or infinite value, or n when all are finite.
size_t firstNonFinite(const float* values, size_t n);

}  // namespace engine
