// SPDX-License-Identifier: BSD-3-Clause
#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace engine {

namespace {
std::string shortNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}
}  // namespace

void validateConfig(const ModelConfig& c) {
  auto fail = [](const std::string& what) { throw EngineError("model shape: " + what); };
  if (c.dim <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.kvHeads <= 0 ||
      c.headDim <= 0 || c.vocab <= 0 || c.seqLen <= 0)
    fail("every size must be positive (" + describeConfig(c) + ")");
  if (c.heads % c.kvHeads != 0)
    fail("heads " + std::to_string(c.heads) + " is not a multiple of kv heads " +
         std::to_string(c.kvHeads));
  if (c.headDim % 2 != 0) fail("head size " + std::to_string(c.headDim) + " is odd; RoPE needs pairs");
  // Far above any real model's (64-256), far below sizes whose tables alone
  // (RoPE's, built before the weights are read) would fill memory.
  if (c.headDim > kMaxHeadDim)
    fail("head size " + std::to_string(c.headDim) + " is larger than " + std::to_string(kMaxHeadDim));
  if (!(c.normEps > 0) || !std::isfinite(c.normEps))
    fail("norm epsilon " + shortNumber(c.normEps) + " must be a positive number");
  if (!(c.ropeTheta > 0) || !std::isfinite(c.ropeTheta))
    fail("RoPE theta " + shortNumber(c.ropeTheta) + " must be a positive number");
  for (float f : c.ropeFreqs)  // angles are position x frequency: finite over the whole context
    if (!(f > 0) || !std::isfinite(f * float(c.seqLen)))
      fail("RoPE frequency " + shortNumber(f) + " is out of range (positive, with angles finite over " +
           std::to_string(c.seqLen) + " positions): check rope_scaling's factor");
  if (!c.ropeFreqs.empty() && int(c.ropeFreqs.size()) != c.headDim / 2)
    fail("RoPE frequency table holds " + std::to_string(c.ropeFreqs.size()) + " values, head size " +
         std::to_string(c.headDim) + " needs " + std::to_string(c.headDim / 2));
}

std::vector<float> ropeInverseFrequencies(const ModelConfig& c) {
  if (!c.ropeFreqs.empty()) return c.ropeFreqs;
  std::vector<float> freqs(c.headDim / 2);
  for (int i = 0; i < c.headDim / 2; ++i) freqs[i] = std::pow(c.ropeTheta, -2.0f * i / c.headDim);
  return freqs;
}

std::string describeConfig(const ModelConfig& c) {
  std::ostringstream s;
  s << c.arch << " dim=" << c.dim << " hidden=" << c.hidden << " layers=" << c.layers
    << " heads=" << c.heads << " kv_heads=" << c.kvHeads << " head_dim=" << c.headDim
    << " vocab=" << c.vocab << " seq_len=" << c.seqLen
    << " rope=" << (c.ropeInterleaved ? "interleaved" : "rotate-half") << " theta=" << c.ropeTheta
    << (c.ropeFreqs.empty() ? "" : " rope_scaled") << (c.qkNorm ? " qk_norm" : "")
    << (c.qkvBias ? " qkv_bias" : "") << (c.tiedClassifier ? " tied" : "");
  return s.str();
}

size_t firstNonFinite(const float* values, size_t n) {
  bool finite = true;  // a pass without early exit vectorizes; only bad values pay for the search
  for (size_t i = 0; i < n; ++i) finite &= std::isfinite(values[i]);
  if (finite) return n;
  return size_t(std::find_if(values, values + n, [](float v) { return !std::isfinite(v); }) - values);
}

void requireFinite(const std::vector<float>& values, const std::string& where) {
  const size_t at = firstNonFinite(values.data(), values.size());
  if (at == values.size()) return;
  throw EngineError(where + " holds " + std::to_string(values[at]) + " (element " + std::to_string(at) +
                    " of those read; a corrupt checkpoint?)");
}

}  // namespace engine
