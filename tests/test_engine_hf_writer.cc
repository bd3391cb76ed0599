// SPDX-License-Identifier: BSD-3-Clause
#include "test_engine_hf_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "safetensors.h"

namespace hftest {

using Json = nlohmann::json;

namespace {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  const std::vector<float>* values;
};

// Every tensor of `w` under its HF name, in HF's order.
std::vector<Tensor> hfTensors(const engine::ModelWeights& w, const WriteOptions& o) {
  const engine::ModelConfig& c = w.config;
  const int64_t dim = c.dim, hd = c.headDim, q = int64_t(c.heads) * hd, kv = int64_t(c.kvHeads) * hd;
  std::vector<Tensor> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab, dim}, &w.embedding});
  for (int i = 0; i < c.layers; ++i) {
    const engine::LayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", {dim}, &l.attnNorm});
    t.push_back({p + "self_attn.q_proj.weight", {q, dim}, &l.wq});
    t.push_back({p + "self_attn.k_proj.weight", {kv, dim}, &l.wk});
    t.push_back({p + "self_attn.v_proj.weight", {kv, dim}, &l.wv});
    t.push_back({p + "self_attn.o_proj.weight", {dim, q}, &l.wo});
    if (c.qkvBias) {
      t.push_back({p + "self_attn.q_proj.bias", {q}, &l.bq});
      t.push_back({p + "self_attn.k_proj.bias", {kv}, &l.bk});
      t.push_back({p + "self_attn.v_proj.bias", {kv}, &l.bv});
    }
    if (c.qkNorm) {
      t.push_back({p + "self_attn.q_norm.weight", {hd}, &l.qNorm});
      t.push_back({p + "self_attn.k_norm.weight", {hd}, &l.kNorm});
    }
    t.push_back({p + "post_attention_layernorm.weight", {dim}, &l.ffnNorm});
    t.push_back({p + "mlp.gate_proj.weight", {c.hidden, dim}, &l.wGate});
    t.push_back({p + "mlp.up_proj.weight", {c.hidden, dim}, &l.wUp});
    t.push_back({p + "mlp.down_proj.weight", {dim, c.hidden}, &l.wDown});
  }
  t.push_back({"model.norm.weight", {dim}, &w.finalNorm});
  if (!c.tiedClassifier) t.push_back({"lm_head.weight", {c.vocab, dim}, &w.classifier});
  return t;
}

void writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// One safetensors file: u64 header length, JSON header, then the data.
void writeSafetensors(const std::string& path, const std::vector<Tensor>& tensors, const std::string& dtype) {
  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const Tensor& t : tensors) {
    const size_t begin = data.size();
    for (float v : *t.values) {
      if (dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&v), 4);
      } else {
        const uint16_t bits = dtype == "BF16" ? engine::hf::floatToBf16(v) : floatToF16(v);
        data.append(reinterpret_cast<const char*>(&bits), 2);
      }
    }
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) bytes[i] = char((n >> (8 * i)) & 0xff);
  writeFile(path, bytes + text + data);
}

Json configJson(const engine::ModelConfig& c, const WriteOptions& o) {
  Json j = {{"architectures", {o.architecture}},
            {"model_type", c.arch},
            {"hidden_act", "silu"},
            {"hidden_size", c.dim},
            {"intermediate_size", c.hidden},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kvHeads},
            {"vocab_size", c.vocab},
            {"max_position_embeddings", c.seqLen},
            {"rms_norm_eps", c.normEps},
            {"rope_theta", c.ropeTheta},
            {"tie_word_embeddings", c.tiedClassifier},
            {"torch_dtype", o.dtype == "F32" ? "float32" : o.dtype == "BF16" ? "bfloat16" : "float16"},
            {"bos_token_id", 1},
            {"eos_token_id", {2, 3}},
            {"rope_scaling", nullptr}};
  // Qwen3 and some Llama variants state head_dim; leave it implied for the others.
  if (c.arch == "qwen3" || c.headDim != c.dim / c.heads) j["head_dim"] = c.headDim;
  if (c.arch == "mistral") j["sliding_window"] = nullptr;
  if (c.arch == "qwen2") j["use_sliding_window"] = false, j["sliding_window"] = 4096;
  return j;
}

}  // namespace

std::string makeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/rcn_hf_test.XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

void removeDir(const std::string& dir) {
  if (dir.empty() || dir.find("rcn_hf_test.") == std::string::npos) return;  // only ours
  const std::string command = "rm -rf '" + dir + "'";
  if (std::system(command.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
}

std::string architectureOf(const std::string& arch) {
  if (arch == "llama") return "LlamaForCausalLM";
  if (arch == "mistral") return "MistralForCausalLM";
  if (arch == "qwen2") return "Qwen2ForCausalLM";
  if (arch == "qwen3") return "Qwen3ForCausalLM";
  throw std::runtime_error("no HF architecture for " + arch);
}

void writeHfModel(const std::string& dir, const engine::ModelWeights& w, const WriteOptions& o) {
  writeFile(dir + "/config.json", configJson(w.config, o).dump(2));
  const std::vector<Tensor> tensors = hfTensors(w, o);
  if (o.shards <= 1) return writeSafetensors(dir + "/model.safetensors", tensors, o.dtype);

  // Round-robin the tensors over the shards, as a real split scatters them.
  Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", Json::object()}};
  std::vector<std::vector<Tensor>> perShard(o.shards);
  for (size_t i = 0; i < tensors.size(); ++i) perShard[i % o.shards].push_back(tensors[i]);
  for (int s = 0; s < o.shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, o.shards);
    writeSafetensors(dir + "/" + name, perShard[s], o.dtype);
    for (const Tensor& t : perShard[s]) index["weight_map"][t.name] = name;
  }
  writeFile(dir + "/model.safetensors.index.json", index.dump(2));
}

std::vector<float> roundToBf16(const std::vector<float>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = engine::hf::bf16ToFloat(engine::hf::floatToBf16(values[i]));
  return out;
}

uint16_t floatToF16(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const float a = std::fabs(value);
  if (std::isnan(a)) return 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14))            // subnormal: multiples of 2^-24
    return sign | uint16_t(std::nearbyint(std::ldexp(a, 24)));
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exponent = e - 1;
  int mantissa = int(std::nearbyint(std::ldexp(a, 10 - exponent)));  // in [1024, 2048]
  if (mantissa == 2048) mantissa = 1024, ++exponent;
  return sign | uint16_t((exponent + 15) << 10) | uint16_t(mantissa - 1024);
}

std::vector<float> roundTo(const std::string& dtype, const std::vector<float>& values) {
  if (dtype == "BF16") return roundToBf16(values);
  if (dtype == "F32") return values;
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = engine::hf::f16ToFloat(floatToF16(values[i]));
  return out;
}

}  // namespace hftest
