// SPDX-License-Identifier: BSD-3-Clause
// Picks the next token from logits: greedy at temperature 0, otherwise a
// seeded draw from softmax(logits / temperature) restricted to the top-k
// tokens and then to the smallest set whose probability reaches top-p.
// The same seed gives the same tokens on every rank and every run.
#pragma once

#include <cstdint>
#include <vector>

namespace engine {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy
  int topK = 0;              // 0: no limit
  float topP = 1.0f;         // 1: no limit
  uint64_t seed = 42;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  int sample(const float* logits, int vocab);

 private:
  float nextUniform();  // in [0, 1)

  SamplerOptions options_;
  uint64_t state_;
  std::vector<int> order_;
  std::vector<float> probs_;
};

// Index of the largest logit (the lowest index on ties).
int argmax(const float* logits, int n);

}  // namespace engine
