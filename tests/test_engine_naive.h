// SPDX-License-Identifier: BSD-3-Clause
// Shared by the engine tests: an independent double-precision forward pass
// of the engine's model (no KV cache, no code shared with CpuModel).
#pragma once

#include <vector>

#include "model.h"

namespace enginetest {

// The logits after tokens[0..n), recomputed from scratch: every position's
// keys and values are derived again from the embeddings. Follows the config's
// RoPE convention and frequency table, q/k norm and q/k/v biases.
std::vector<double> naiveLogits(const engine::ModelWeights& m, const std::vector<int>& tokens);

}  // namespace enginetest
