// SPDX-License-Identifier: BSD-3-Clause
// A Hugging Face checkpoint directory (config.json + safetensors) -> the
// engine's float32 ModelWeights, whole or one tensor-parallel rank's shard.
#pragma once

#include <string>
#include <vector>

#include "hf_config.h"
#include "model.h"
#include "shard.h"

namespace engine::hf {

struct HfModel {
  HfConfig hf;          // hf.config == weights.config
  ModelWeights weights;  // Qwen2's q/k/v biases in LayerWeights.bq/bk/bv
  // Tensors of the checkpoint this config.json does not use (more layers
  // than it says, a bias it does not enable), leaving out those known to be
  // spare (a tied checkpoint's lm_head.weight, rotary_emb.inv_freq buffers).
  std::vector<std::string> unusedTensors;
};

// The whole model. `maxSeqLen` (> 0) caps the context (see readHfConfig).
// Throws EngineError naming the file and tensor on any missing, misshapen,
// truncated or corrupt input.
HfModel loadHfModel(const std::string& dir, int maxSeqLen);

// Only what rank `rank` of `size` holds, equal to
// shardWeights(loadHfModel(dir).weights, planShard(config, size, rank)):
// its rows of Q/K/V/gate/up and columns of O/down are the only parts of those
// matrices it reads from the mmapped files; embedding, norms and LM head whole.
HfModel loadHfShard(const std::string& dir, int maxSeqLen, int size, int rank);

}  // namespace engine::hf
