// SPDX-License-Identifier: BSD-3-Clause
#include "shapes.h"

#include <cmath>

namespace engine {

ModelConfig shapeConfig(const std::string& name) {
  ModelConfig c;
  c.seqLen = 4096;
  c.ropeInterleaved = false;  // Hugging Face checkpoints rotate halves
  c.normEps = 1e-5f;
  if (name == "llama3-1b") {
    c.arch = "llama";
    c.dim = 2048, c.hidden = 8192, c.layers = 16, c.heads = 32, c.kvHeads = 8, c.headDim = 64;
    c.vocab = 128256, c.ropeTheta = 500000.0f, c.tiedClassifier = true;
  } else if (name == "llama3-8b") {
    c.arch = "llama";
    c.dim = 4096, c.hidden = 14336, c.layers = 32, c.heads = 32, c.kvHeads = 8, c.headDim = 128;
    c.vocab = 128256, c.ropeTheta = 500000.0f, c.tiedClassifier = false;
  } else if (name == "qwen3-32b") {
    c.arch = "qwen3";
    c.dim = 5120, c.hidden = 25600, c.layers = 64, c.heads = 64, c.kvHeads = 8, c.headDim = 128;
    c.vocab = 151936, c.ropeTheta = 1000000.0f, c.tiedClassifier = false, c.qkNorm = true;
    c.normEps = 1e-6f;
  } else if (name == "tiny-llama") {
    c.arch = "llama";
    c.dim = 96, c.hidden = 160, c.layers = 3, c.heads = 6, c.kvHeads = 2, c.headDim = 16;
    c.vocab = 300, c.seqLen = 128, c.tiedClassifier = false;
    c.ropeInterleaved = true;  // as llama2.c checkpoints
  } else if (name == "tiny-qwen3") {
    c.arch = "qwen3";
    c.dim = 64, c.hidden = 128, c.layers = 2, c.heads = 4, c.kvHeads = 2, c.headDim = 32;
    c.vocab = 256, c.seqLen = 128, c.ropeTheta = 1000000.0f, c.qkNorm = true, c.tiedClassifier = true;
  } else if (name == "tiny-qwen2") {
    c.arch = "qwen2";
    c.dim = 64, c.hidden = 96, c.layers = 2, c.heads = 4, c.kvHeads = 2, c.headDim = 16;
    c.vocab = 256, c.seqLen = 128, c.ropeTheta = 1000000.0f, c.qkvBias = true, c.tiedClassifier = false;
  } else {
    throw EngineError("unknown shape '" + name +
                      "' (known: llama3-1b, llama3-8b, qwen3-32b, tiny-llama, tiny-qwen3, tiny-qwen2)");
  }
  validateConfig(c);
  return c;
}

namespace {

struct Rng {
  uint64_t state;
  float uniform() {  // in [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(uint32_t(state >> 40)) / float(1u << 23) - 1.0f;
  }
};

std::vector<float> randomMatrix(Rng& rng, size_t rows, size_t cols) {
  std::vector<float> m(rows * cols);
  const float scale = 1.0f / std::sqrt(float(cols));
  for (float& v : m) v = rng.uniform() * scale;
  return m;
}

std::vector<float> randomBias(Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = 0.5f * rng.uniform();
  return v;
}

std::vector<float> randomNorm(Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = 1.0f + 0.1f * rng.uniform();
  return v;
}

}  // namespace

ModelWeights randomWeights(const ModelConfig& c, uint64_t seed) {
  validateConfig(c);
  Rng rng{seed};
  ModelWeights m;
  m.config = c;
  const size_t q = size_t(c.heads) * c.headDim, kv = size_t(c.kvHeads) * c.headDim;
  m.embedding = randomMatrix(rng, c.vocab, c.dim);
  for (float& v : m.embedding) v *= std::sqrt(float(c.dim));  // embeddings are O(1), not O(1/sqrt(dim))
  for (int l = 0; l < c.layers; ++l) {
    LayerWeights w;
    w.attnNorm = randomNorm(rng, c.dim);
    w.wq = randomMatrix(rng, q, c.dim);
    w.wk = randomMatrix(rng, kv, c.dim);
    w.wv = randomMatrix(rng, kv, c.dim);
    w.wo = randomMatrix(rng, c.dim, q);
    w.ffnNorm = randomNorm(rng, c.dim);
    w.wGate = randomMatrix(rng, c.hidden, c.dim);
    w.wDown = randomMatrix(rng, c.dim, c.hidden);
    w.wUp = randomMatrix(rng, c.hidden, c.dim);
    if (c.qkNorm) {
      w.qNorm = randomNorm(rng, c.headDim);
      w.kNorm = randomNorm(rng, c.headDim);
    }
    if (c.qkvBias) {  // drawn last, so models without biases keep their weights
      w.bq = randomBias(rng, q);
      w.bk = randomBias(rng, kv);
      w.bv = randomBias(rng, kv);
    }
    m.layers.push_back(std::move(w));
  }
  m.finalNorm = randomNorm(rng, c.dim);
  if (!c.tiedClassifier) m.classifier = randomMatrix(rng, c.vocab, c.dim);
  return m;
}

}  // namespace engine
