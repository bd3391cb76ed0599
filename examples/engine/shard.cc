// SPDX-License-Identifier: BSD-3-Clause
#include "shard.h"

#include <string>

namespace engine {

ShardLayout planShard(const ModelConfig& c, int size, int rank) {
  validateConfig(c);
  auto fail = [&](const std::string& what) {
    throw EngineError("cannot split the model over " + std::to_string(size) + " ranks: " + what);
  };
  if (size < 1 || rank < 0 || rank >= size) fail("rank " + std::to_string(rank) + " out of range");
  if (c.heads % size != 0) fail(std::to_string(c.heads) + " query heads do not divide evenly");
  if (c.hidden % size != 0) fail("MLP size " + std::to_string(c.hidden) + " does not divide evenly");
  if (c.kvHeads % size != 0 && size % c.kvHeads != 0)
    fail(std::to_string(c.kvHeads) + " KV heads neither divide nor replicate evenly");

  ShardLayout l;
  l.rank = rank;
  l.size = size;
  l.group = c.heads / c.kvHeads;
  l.heads = c.heads / size;
  l.headStart = rank * l.heads;
  l.kvStart = l.headStart / l.group;
  l.kvHeads = (l.headStart + l.heads - 1) / l.group + 1 - l.kvStart;
  l.hidden = c.hidden / size;
  l.hiddenStart = rank * l.hidden;
  return l;
}

namespace {

// Rows [first, first+count) of a row-major matrix with `cols` columns.
std::vector<float> takeRows(const std::vector<float>& m, int cols, int first, int count) {
  return std::vector<float>(m.begin() + size_t(first) * cols, m.begin() + size_t(first + count) * cols);
}

// Columns [first, first+count) of a row-major [rows][cols] matrix.
std::vector<float> takeCols(const std::vector<float>& m, int rows, int cols, int first, int count) {
  std::vector<float> out(size_t(rows) * count);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < count; ++c) out[size_t(r) * count + c] = m[size_t(r) * cols + first + c];
  return out;
}

}  // namespace

ModelWeights shardWeights(const ModelWeights& full, const ShardLayout& l) {
  const ModelConfig& c = full.config;
  ModelWeights out;
  out.config = c;
  out.embedding = full.embedding;
  out.finalNorm = full.finalNorm;
  out.classifier = full.classifier;
  const int hd = c.headDim;
  for (const LayerWeights& w : full.layers) {
    LayerWeights s;
    s.attnNorm = w.attnNorm;
    s.ffnNorm = w.ffnNorm;
    s.qNorm = w.qNorm;
    s.kNorm = w.kNorm;
    if (c.qkvBias) {  // a bias is a one-column matrix: split with its rows
      if (w.bq.size() != size_t(c.heads) * hd || w.bk.size() != size_t(c.kvHeads) * hd ||
          w.bv.size() != size_t(c.kvHeads) * hd)
        throw EngineError("model has qkv_bias but a layer's q/k/v bias is missing or misshapen");
      s.bq = takeRows(w.bq, 1, l.headStart * hd, l.heads * hd);
      s.bk = takeRows(w.bk, 1, l.kvStart * hd, l.kvHeads * hd);
      s.bv = takeRows(w.bv, 1, l.kvStart * hd, l.kvHeads * hd);
    }
    s.wq = takeRows(w.wq, c.dim, l.headStart * hd, l.heads * hd);
    s.wk = takeRows(w.wk, c.dim, l.kvStart * hd, l.kvHeads * hd);
    s.wv = takeRows(w.wv, c.dim, l.kvStart * hd, l.kvHeads * hd);
    s.wo = takeCols(w.wo, c.dim, c.heads * hd, l.headStart * hd, l.heads * hd);
    s.wGate = takeRows(w.wGate, c.dim, l.hiddenStart, l.hidden);
    s.wUp = takeRows(w.wUp, c.dim, l.hiddenStart, l.hidden);
    s.wDown = takeCols(w.wDown, c.dim, c.hidden, l.hiddenStart, l.hidden);
    out.layers.push_back(std::move(s));
  }
  return out;
}

}  // namespace engine
