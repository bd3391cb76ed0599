// SPDX-License-Identifier: BSD-3-Clause
#include "hf_config.h"

#include <algorithm>
#include <cmath>

#include "json_util.h"

namespace engine::hf {

namespace {

// The architecture names we accept, and the engine's short name for each.
const char* archShortName(const std::string& architecture) {
  if (architecture == "LlamaForCausalLM") return "llama";
  if (architecture == "MistralForCausalLM") return "mistral";
  if (architecture == "Qwen2ForCausalLM") return "qwen2";
  if (architecture == "Qwen3ForCausalLM") return "qwen3";
  return nullptr;
}

std::string readArchitecture(const Json& j, const std::string& what) {
  auto it = j.find("architectures");
  if (it == j.end() || !it->is_array() || it->empty() || !(*it)[0].is_string())
    throw EngineError(what + ": field \"architectures\" is missing or not a list of names");
  return (*it)[0].get<std::string>();
}

// rope_scaling of type "default" (or none) changes nothing; anything else does.
std::string readRopeScaling(const Json& j) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return "";
  if (it->is_object()) {
    std::string type = it->value("rope_type", it->value("type", std::string()));
    if (type == "default") return "";
  }
  return it->dump();
}

RopeScaling parseRopeScaling(const Json& j, const std::string& what) {
  RopeScaling r;
  auto it = j.find("rope_scaling");
  if (it == j.end() || !it->is_object()) return r;
  const std::string where = what + ": rope_scaling";
  r.type = it->value("rope_type", it->value("type", std::string()));
  if (r.type == "default") r.type.clear();
  // The types the forward pass applies need their fields, as transformers
  // does; the others are refused later (requireEngineSupport) by their name.
  if (r.type != "linear" && r.type != "llama3") return r;
  r.factor = requireNumber(*it, "factor", where);
  if (r.type == "llama3") {
    r.lowFreqFactor = requireNumber(*it, "low_freq_factor", where);
    r.highFreqFactor = requireNumber(*it, "high_freq_factor", where);
    r.originalContext = requireInt(*it, "original_max_position_embeddings", where);
  }
  return r;
}

// The longest context the forward pass runs exactly.
int contextLength(const Json& j, int maxSeqLen, const std::string& what) {
  int seqLen = requireInt(j, "max_position_embeddings", what);
  if (maxSeqLen > 0) seqLen = std::min(seqLen, maxSeqLen);
  // A sliding window only differs from full attention past its width.
  const bool windowed = boolOr(j, "use_sliding_window", true, what);
  const int window = intOr(j, "sliding_window", 0, what);
  if (window < 0) throw EngineError(what + ": field \"sliding_window\" is negative");
  if (windowed && window > 0) seqLen = std::min(seqLen, window);
  return seqLen;
}

// eos_token_id is one id or a list of them (Llama 3.1 instruct).
std::vector<int> readTokenIds(const Json& j, const char* key, const std::string& what) {
  std::vector<int> ids;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ids;
  const Json list = it->is_array() ? *it : Json::array({*it});
  for (const Json& id : list) {
    if (!id.is_number_integer()) throw EngineError(what + ": field \"" + key + "\" is not a token id or list of them");
    const long long value = id.get<long long>();  // get<int> would wrap 2^32 + 42 to 42
    if (value < 0 || value >= (1LL << 31))
      throw EngineError(what + ": field \"" + key + "\" holds token id " + id.dump() + ", out of range");
    ids.push_back(int(value));
  }
  return ids;
}

}  // namespace

HfConfig readHfConfig(const std::string& dir, int maxSeqLen) try {
  const std::string what = dir + "/config.json";
  const Json j = readJsonFile(what);
  if (!j.is_object()) throw EngineError(what + ": not a JSON object");

  HfConfig hf;
  hf.architecture = readArchitecture(j, what);
  const char* arch = archShortName(hf.architecture);
  if (!arch)
    throw EngineError(what + ": architecture " + hf.architecture +
                      " is not supported (LlamaForCausalLM, MistralForCausalLM, "
                      "Qwen2ForCausalLM, Qwen3ForCausalLM are)");
  const std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu") throw EngineError(what + ": hidden_act " + act + " is not supported (silu is)");

  ModelConfig& c = hf.config;
  c.arch = arch;
  c.dim = requireInt(j, "hidden_size", what);
  c.hidden = requireInt(j, "intermediate_size", what);
  c.layers = requireInt(j, "num_hidden_layers", what);
  c.heads = requireInt(j, "num_attention_heads", what);
  c.kvHeads = intOr(j, "num_key_value_heads", c.heads, what);
  c.headDim = intOr(j, "head_dim", c.heads > 0 ? c.dim / c.heads : 0, what);
  c.vocab = requireInt(j, "vocab_size", what);
  c.seqLen = contextLength(j, maxSeqLen, what);
  c.normEps = float(numberOr(j, "rms_norm_eps", 1e-6, what));
  c.ropeTheta = float(numberOr(j, "rope_theta", 10000.0, what));
  c.ropeInterleaved = false;  // HF checkpoints are permuted for rotate-half RoPE
  c.qkNorm = c.arch == "qwen3";
  c.tiedClassifier = boolOr(j, "tie_word_embeddings", false, what);
  try {
    validateConfig(c);
  } catch (const EngineError& e) {
    throw EngineError(what + ": " + e.what());
  }

  // Qwen2 always has q/k/v biases; Llama/Mistral/Qwen3 have them only with
  // attention_bias, which (for Llama) also puts one on o_proj.
  if (c.arch == "qwen2") hf.attentionBias = c.qkvBias = true;
  else if (boolOr(j, "attention_bias", false, what))
    throw EngineError(what + ": attention_bias=true is not supported for " + hf.architecture);
  if (boolOr(j, "mlp_bias", false, what))
    throw EngineError(what + ": mlp_bias=true is not supported");
  hf.bosToken = intOr(j, "bos_token_id", -1, what);
  hf.eosTokens = readTokenIds(j, "eos_token_id", what);
  hf.ropeScaling = readRopeScaling(j);
  hf.rope = parseRopeScaling(j, what);
  if (!hf.ropeScaling.empty()) {
    if (hf.rope.type == "llama3" || hf.rope.type == "linear") {
      try {
        for (double f : ropeFrequencies(hf)) c.ropeFreqs.push_back(float(f));
      } catch (const EngineError& e) {
        throw EngineError(what + ": " + e.what());
      }
    } else {
      hf.unsupported.push_back("rope_scaling " + hf.ropeScaling +
                               " is not supported by the engine (types llama3 and linear are)");
    }
  }
  return hf;
} catch (const Json::exception& e) {  // a field of an unexpected JSON type
  throw EngineError(dir + "/config.json: unexpected structure (" + e.what() + ")");
}

std::vector<double> ropeFrequencies(const HfConfig& hf) {
  const ModelConfig& c = hf.config;
  const RopeScaling& r = hf.rope;
  std::vector<double> freq(c.headDim / 2);
  for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(double(c.ropeTheta), -2.0 * double(i) / c.headDim);
  if (hf.ropeScaling.empty()) return freq;
  if (!(r.factor > 0)) throw EngineError("rope_scaling: factor must be positive");
  if (r.type == "linear") {
    for (double& f : freq) f /= r.factor;
    return freq;
  }
  if (r.type != "llama3") throw EngineError("rope_scaling type \"" + r.type + "\" is not supported");
  if (!(r.lowFreqFactor > 0) || r.highFreqFactor <= r.lowFreqFactor)
    throw EngineError("rope_scaling: low_freq_factor must be positive and high_freq_factor larger");
  if (r.originalContext <= 0) throw EngineError("rope_scaling: original_max_position_embeddings must be positive");
  // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and
  // those between blended smoothly.
  const double kPi = 3.14159265358979323846;
  const double lowWavelen = r.originalContext / r.lowFreqFactor, highWavelen = r.originalContext / r.highFreqFactor;
  for (double& f : freq) {
    const double wavelen = 2 * kPi / f;
    if (wavelen > lowWavelen) {
      f /= r.factor;
    } else if (wavelen >= highWavelen) {
      const double smooth = (r.originalContext / wavelen - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
      f = (1 - smooth) * f / r.factor + smooth * f;
    }
  }
  return freq;
}

void requireEngineSupport(const HfConfig& config) {
  if (config.unsupported.empty()) return;
  std::string list;
  for (const std::string& u : config.unsupported) list += (list.empty() ? "" : "; ") + u;
  throw EngineError(config.architecture + ": " + list);
}

}  // namespace engine::hf
