// SPDX-License-Identifier: BSD-3-Clause
#include "hf_loader.h"

#include "safetensors.h"

namespace engine::hf {

namespace {

std::string layerName(int layer, const char* tensor) {
  return "model.layers." + std::to_string(layer) + "." + tensor;
}

// Layer `i`'s share for layout `l`: rows of the column-parallel projections,
// columns of the row-parallel ones, norms whole.
LayerWeights loadLayer(const Checkpoint& ckpt, const ModelConfig& c, const ShardLayout& l, int i) {
  const int64_t dim = c.dim, hd = c.headDim, qRows = int64_t(c.heads) * hd, kvRows = int64_t(c.kvHeads) * hd;
  auto name = [&](const char* tensor) { return layerName(i, tensor); };
  LayerWeights w;
  w.attnNorm = ckpt.read(name("input_layernorm.weight"), {dim});
  w.ffnNorm = ckpt.read(name("post_attention_layernorm.weight"), {dim});
  w.wq = ckpt.readRows(name("self_attn.q_proj.weight"), qRows, dim, l.headStart * hd, l.heads * hd);
  w.wk = ckpt.readRows(name("self_attn.k_proj.weight"), kvRows, dim, l.kvStart * hd, l.kvHeads * hd);
  w.wv = ckpt.readRows(name("self_attn.v_proj.weight"), kvRows, dim, l.kvStart * hd, l.kvHeads * hd);
  w.wo = ckpt.readCols(name("self_attn.o_proj.weight"), dim, qRows, l.headStart * hd, l.heads * hd);
  w.wGate = ckpt.readRows(name("mlp.gate_proj.weight"), c.hidden, dim, l.hiddenStart, l.hidden);
  w.wUp = ckpt.readRows(name("mlp.up_proj.weight"), c.hidden, dim, l.hiddenStart, l.hidden);
  w.wDown = ckpt.readCols(name("mlp.down_proj.weight"), dim, c.hidden, l.hiddenStart, l.hidden);
  if (c.qkNorm) {
    w.qNorm = ckpt.read(name("self_attn.q_norm.weight"), {hd});
    w.kNorm = ckpt.read(name("self_attn.k_norm.weight"), {hd});
  }
  return w;
}

// Qwen2's q/k/v biases, sliced like the rows of wq/wk/wv.
void loadBiases(LayerWeights& w, const Checkpoint& ckpt, const ModelConfig& c, const ShardLayout& l, int i) {
  const int64_t hd = c.headDim, qRows = int64_t(c.heads) * hd, kvRows = int64_t(c.kvHeads) * hd;
  auto slice = [&](const char* tensor, int64_t rows, int64_t first, int64_t count) {
    const std::string n = layerName(i, tensor);
    std::vector<float> all = ckpt.read(n, {rows});
    return std::vector<float>(all.begin() + first, all.begin() + first + count);
  };
  w.bq = slice("self_attn.q_proj.bias", qRows, l.headStart * hd, l.heads * hd);
  w.bk = slice("self_attn.k_proj.bias", kvRows, l.kvStart * hd, l.kvHeads * hd);
  w.bv = slice("self_attn.v_proj.bias", kvRows, l.kvStart * hd, l.kvHeads * hd);
}

HfModel load(const std::string& dir, int maxSeqLen, int size, int rank) {
  HfModel m;
  m.hf = readHfConfig(dir, maxSeqLen);
  const ModelConfig& c = m.hf.config;
  const ShardLayout layout = planShard(c, size, rank);
  const Checkpoint ckpt(dir);

  ModelWeights& w = m.weights;
  w.config = c;
  w.embedding = ckpt.read("model.embed_tokens.weight", {c.vocab, c.dim});
  for (int i = 0; i < c.layers; ++i) {
    w.layers.push_back(loadLayer(ckpt, c, layout, i));
    if (c.qkvBias) loadBiases(w.layers.back(), ckpt, c, layout, i);
  }
  w.finalNorm = ckpt.read("model.norm.weight", {c.dim});
  // A tied checkpoint may still carry lm_head.weight (a copy); HF ignores it too.
  if (!c.tiedClassifier) w.classifier = ckpt.read("lm_head.weight", {c.vocab, c.dim});
  for (const std::string& name : ckpt.untouched())
    if (name != "lm_head.weight" && name.find("rotary_emb.inv_freq") == std::string::npos) m.unusedTensors.push_back(name);
  return m;
}

}  // namespace

HfModel loadHfModel(const std::string& dir, int maxSeqLen) { return load(dir, maxSeqLen, 1, 0); }

HfModel loadHfShard(const std::string& dir, int maxSeqLen, int size, int rank) {
  return load(dir, maxSeqLen, size, rank);
}

}  // namespace engine::hf
