// SPDX-License-Identifier: BSD-3-Clause
// Writes small Hugging Face checkpoints (config.json + safetensors) from the
// engine's ModelWeights, for the HF loader tests: every supported
// architecture, BF16 or F32, one file or several shards with an index.
// Qwen2's q/k/v biases are written from LayerWeights.bq/bk/bv (config.qkvBias).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hf_loader.h"
#include "model.h"

namespace hftest {

struct WriteOptions {
  std::string architecture = "LlamaForCausalLM";
  std::string dtype = "F32";  // F32, BF16 or F16
  int shards = 1;  // > 1 writes model-0000k-of-0000n.safetensors + index
};

// A fresh empty directory under $TMPDIR (or /tmp), removed by removeDir.
std::string makeTempDir();
void removeDir(const std::string& dir);

// The HF architecture name for the engine's short name (llama -> LlamaForCausalLM).
std::string architectureOf(const std::string& arch);

// Writes `dir`/config.json and the safetensors file(s) holding `w`.
void writeHfModel(const std::string& dir, const engine::ModelWeights& w, const WriteOptions& options);

// `values` as they come back from a BF16 / F16 checkpoint (rounded to nearest
// even), or unchanged for F32.
std::vector<float> roundToBf16(const std::vector<float>& values);
std::vector<float> roundTo(const std::string& dtype, const std::vector<float>& values);

// float -> IEEE half, round to nearest even, subnormals included.
uint16_t floatToF16(float value);

}  // namespace hftest
