// SPDX-License-Identifier: BSD-3-Clause
// Named model shapes for benchmarks without a checkpoint, and seeded random
// weights of any shape (small ones for tests; the GPU fills big ones itself).
#pragma once

#include <cstdint>
#include <string>

#include "model.h"

namespace engine {

// llama3-1b, llama3-8b, qwen3-32b, or tiny-llama / tiny-qwen3 / tiny-qwen2 (test sizes).
// Throws EngineError listing the known names.
ModelConfig shapeConfig(const std::string& name);

// Uniform weights scaled by 1/sqrt(fan_in), norms near 1: the activations
// stay in a sane range through many layers.
ModelWeights randomWeights(const ModelConfig& config, uint64_t seed);

}  // namespace engine
