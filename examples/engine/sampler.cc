// SPDX-License-Identifier: BSD-3-Clause
#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model.h"

namespace engine {

int argmax(const float* logits, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

Sampler::Sampler(const SamplerOptions& options)
    : options_(options), state_(options.seed ? options.seed : 0x9E3779B97F4A7C15ull) {}

float Sampler::nextUniform() {
  // xorshift64*: small, fast, and the same on every platform.
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return float((state_ * 0x2545F4914F6CDD1Dull) >> 40) / float(1u << 24);
}

// A NaN or infinite logit has no place in either order (argmax skips NaN and
// takes index 0; the sort's comparison is not an order), so the token would
// be garbage with nothing said: the model's numbers overflowed.
static void requireFiniteLogits(const float* logits, int vocab) {
  const size_t at = firstNonFinite(logits, size_t(vocab));
  if (at == size_t(vocab)) return;
  throw EngineError("logit " + std::to_string(at) + " is " + std::to_string(logits[at]) +
                    ": the model's activations overflowed (weights out of range?); no token can be sampled");
}

int Sampler::sample(const float* logits, int vocab) {
  requireFiniteLogits(logits, vocab);
  if (options_.temperature <= 0.0f) return argmax(logits, vocab);

  // Candidates sorted by logit, highest first, cut to top-k.
  order_.resize(vocab);
  for (int i = 0; i < vocab; ++i) order_[i] = i;
  int keep = (options_.topK > 0 && options_.topK < vocab) ? options_.topK : vocab;
  auto higher = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), higher);
  order_.resize(keep);

  // Softmax over the candidates at the given temperature.
  probs_.resize(keep);
  const float maxLogit = logits[order_[0]];
  double total = 0;
  for (int i = 0; i < keep; ++i) {
    probs_[i] = std::exp((logits[order_[i]] - maxLogit) / options_.temperature);
    total += probs_[i];
  }
  for (float& p : probs_) p = float(p / total);

  // Nucleus: the shortest prefix whose mass reaches top-p.
  float mass = 0;
  int nucleus = keep;
  for (int i = 0; i < keep; ++i) {
    mass += probs_[i];
    if (mass >= options_.topP) {
      nucleus = i + 1;
      break;
    }
  }
  const float draw = nextUniform() * std::min(mass, 1.0f);
  float cumulative = 0;
  for (int i = 0; i < nucleus; ++i) {
    cumulative += probs_[i];
    if (draw < cumulative) return order_[i];
  }
  return order_[nucleus - 1];
}

}  // namespace engine
