// SPDX-License-Identifier: BSD-3-Clause
// config.json of a Hugging Face causal LM -> the engine's ModelConfig.
// Supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v
// biases), Qwen3ForCausalLM (q/k norm). All use HF's rotate-half RoPE.
#pragma once

#include <string>
#include <vector>

#include "model.h"

namespace engine::hf {

// rope_scaling of config.json. "llama3" (Llama 3.1/3.2) and "linear" are
// understood: readHfConfig puts ropeFrequencies() into ModelConfig.ropeFreqs.
struct RopeScaling {
  std::string type;             // empty: none
  double factor = 1.0;
  double lowFreqFactor = 1.0;   // llama3
  double highFreqFactor = 4.0;  // llama3
  int originalContext = 8192;   // llama3: original_max_position_embeddings
};

struct HfConfig {
  ModelConfig config;
  std::string architecture;       // as written in config.json, e.g. "Qwen2ForCausalLM"
  bool attentionBias = false;     // q/k/v projections carry biases (Qwen2); also config.qkvBias
  std::string ropeScaling;        // rope_scaling as JSON text; empty when none/default
  RopeScaling rope;               // parsed, when of a type we understand
  int bosToken = -1;              // bos_token_id, -1 when absent
  std::vector<int> eosTokens;     // eos_token_id (one or a list): generation stops at any
  // What this checkpoint needs that the engine's forward pass does not do
  // (RoPE scaling other than llama3/linear), one sentence each; empty when it runs as is.
  std::vector<std::string> unsupported;
};

// Reads `dir`/config.json. The context (seqLen) is max_position_embeddings
// capped at `maxSeqLen` (when > 0) and at a Mistral-style sliding window, so
// the full-attention forward pass stays exact. Throws EngineError naming the
// file and field, or the architecture, when it cannot be used.
HfConfig readHfConfig(const std::string& dir, int maxSeqLen);

// RoPE's inverse frequency for each of the headDim/2 rotation pairs,
// theta^(-2i/headDim), adjusted by rope_scaling: what a forward pass that
// supports Llama 3.1/3.2 checkpoints would rotate by. Throws EngineError for
// scaling types it does not know (e.g. yarn, dynamic).
std::vector<double> ropeFrequencies(const HfConfig& config);

// Throws EngineError listing config.unsupported, if any: for callers whose
// forward pass would otherwise silently compute something else.
void requireEngineSupport(const HfConfig& config);

}  // namespace engine::hf
