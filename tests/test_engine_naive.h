// Shared by the engine tests: an independent double-precision forward pass
// of the engine's model (no KV cache, no code shared with CpuModel), and the
// path of a model file from ../shared/models.
#pragma once

#include <string>
#include <vector>

#include "model.h"

namespace enginetest {

// The logits after tokens[0..n), recomputed from scratch: every position's
// keys and values are derived again from the embeddings. Follows the config's
// RoPE convention and frequency table, q/k norm and q/k/v biases.
std::vector<double> naiveLogits(const engine::ModelWeights& m, const std::vector<int>& tokens);

// ROCENANTE_SHARED_DIR (default ../shared) + /models/ + file, or skip the
// whole test (exit 77) when it is absent.
std::string sharedModel(const char* file);

}  // namespace enginetest
