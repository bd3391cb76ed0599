// SPDX-License-Identifier: BSD-3-Clause
// --model PATH: a llama2.c checkpoint file, or a Hugging Face checkpoint
// directory when the engine was built with rcn_engine_hf (docs/ENGINE_HF.md).
#pragma once

#include <string>

#include "model.h"

namespace engine {

// Rank `rank` of `size`'s shard of the weights (size 1: the whole model).
// The context is capped at 4096 positions. Throws EngineError with the reason.
ModelWeights loadCheckpointShard(const std::string& path, int size, int rank);

// The config loadCheckpointShard's weights would have (context capped the
// same way), read without the weights.
ModelConfig checkpointConfig(const std::string& path);

}  // namespace engine
