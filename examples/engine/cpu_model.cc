// SPDX-License-Identifier: BSD-3-Clause
#include "cpu_model.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>

namespace engine {

void matvec(float* y, const float* W, const float* x, int out, int in) {
  for (int o = 0; o < out; ++o) {
    const float* row = W + size_t(o) * in;
    float s = 0;
    for (int i = 0; i < in; ++i) s += row[i] * x[i];
    y[o] = s;
  }
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  float ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rope(float* head, int headDim, int pos, const float* invFreq, bool interleaved) {
  const int half = headDim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = pos * invFreq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    float* a = interleaved ? &head[2 * i] : &head[i];
    float* b = interleaved ? &head[2 * i + 1] : &head[i + half];
    const float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x0 * s + x1 * c;
  }
}

void addBias(float* x, const std::vector<float>& bias, int n) {
  if (bias.empty()) return;
  for (int i = 0; i < n; ++i) x[i] += bias[i];
}

CpuModel::CpuModel(ModelWeights weights, const ShardLayout& layout, AllReduceHook* allReduce)
    : w_(std::move(weights)), layout_(layout), allReduce_(allReduce),
      ropeFreqs_(ropeInverseFrequencies(w_.config)) {
  const ModelConfig& c = w_.config;
  const int hd = c.headDim;
  x_.resize(c.dim);
  xb_.resize(std::max(c.dim, layout.heads * hd));
  q_.resize(layout.heads * hd);
  k_.resize(layout.kvHeads * hd);
  v_.resize(layout.kvHeads * hd);
  att_.resize(layout.heads * hd);
  scores_.resize(c.seqLen);
  out_.resize(c.dim);
  gate_.resize(layout.hidden);
  up_.resize(layout.hidden);
  logits_.resize(c.vocab);
  keyCache_.assign(c.layers, std::vector<float>(size_t(c.seqLen) * layout.kvHeads * hd));
  valueCache_.assign(c.layers, std::vector<float>(size_t(c.seqLen) * layout.kvHeads * hd));
}

const std::vector<float>& CpuModel::forward(int token, int pos) {
  const ModelConfig& c = w_.config;
  if (token < 0 || token >= c.vocab) throw EngineError("token " + std::to_string(token) + " out of vocabulary");
  if (pos < 0 || pos >= c.seqLen) throw EngineError("position " + std::to_string(pos) + " beyond seq_len");
  std::copy_n(&w_.embedding[size_t(token) * c.dim], c.dim, x_.begin());
  for (int l = 0; l < c.layers; ++l) {
    attention(l, pos);
    mlp(l);
  }
  rmsnorm(x_.data(), x_.data(), w_.finalNorm.data(), c.dim, c.normEps);
  matvec(logits_.data(), w_.lmHead().data(), x_.data(), c.vocab, c.dim);
  return logits_;
}

void CpuModel::attention(int l, int pos) {
  const ModelConfig& c = w_.config;
  const LayerWeights& w = w_.layers[l];
  const int hd = c.headDim, kvDim = layout_.kvHeads * hd;
  rmsnorm(xb_.data(), x_.data(), w.attnNorm.data(), c.dim, c.normEps);
  matvec(q_.data(), w.wq.data(), xb_.data(), layout_.heads * hd, c.dim);
  matvec(k_.data(), w.wk.data(), xb_.data(), kvDim, c.dim);
  matvec(v_.data(), w.wv.data(), xb_.data(), kvDim, c.dim);
  addBias(q_.data(), w.bq, layout_.heads * hd);
  addBias(k_.data(), w.bk, kvDim);
  addBias(v_.data(), w.bv, kvDim);
  for (int h = 0; h < layout_.heads; ++h) {
    float* head = &q_[h * hd];
    if (c.qkNorm) rmsnorm(head, head, w.qNorm.data(), hd, c.normEps);
    rope(head, hd, pos, ropeFreqs_.data(), c.ropeInterleaved);
  }
  for (int h = 0; h < layout_.kvHeads; ++h) {
    float* head = &k_[h * hd];
    if (c.qkNorm) rmsnorm(head, head, w.kNorm.data(), hd, c.normEps);
    rope(head, hd, pos, ropeFreqs_.data(), c.ropeInterleaved);
  }
  std::copy(k_.begin(), k_.end(), keyCache_[l].begin() + size_t(pos) * kvDim);
  std::copy(v_.begin(), v_.end(), valueCache_[l].begin() + size_t(pos) * kvDim);

  const float scale = 1.0f / std::sqrt(float(hd));
  for (int h = 0; h < layout_.heads; ++h) {
    const int kvHead = layout_.kvHeadOf(h);
    const float* q = &q_[h * hd];
    float maxScore = -INFINITY;
    for (int t = 0; t <= pos; ++t) {
      const float* k = &keyCache_[l][size_t(t) * kvDim + kvHead * hd];
      float s = 0;
      for (int i = 0; i < hd; ++i) s += q[i] * k[i];
      scores_[t] = s * scale;
      maxScore = std::max(maxScore, scores_[t]);
    }
    float total = 0;
    for (int t = 0; t <= pos; ++t) total += scores_[t] = std::exp(scores_[t] - maxScore);
    float* out = &att_[h * hd];
    std::fill(out, out + hd, 0.0f);
    for (int t = 0; t <= pos; ++t) {
      const float* v = &valueCache_[l][size_t(t) * kvDim + kvHead * hd];
      const float p = scores_[t] / total;
      for (int i = 0; i < hd; ++i) out[i] += p * v[i];
    }
  }
  matvec(out_.data(), w.wo.data(), att_.data(), c.dim, layout_.heads * hd);
  allReduce_->sum(out_.data(), c.dim);
  for (int i = 0; i < c.dim; ++i) x_[i] += out_[i];
}

void CpuModel::mlp(int l) {
  const ModelConfig& c = w_.config;
  const LayerWeights& w = w_.layers[l];
  rmsnorm(xb_.data(), x_.data(), w.ffnNorm.data(), c.dim, c.normEps);
  matvec(gate_.data(), w.wGate.data(), xb_.data(), layout_.hidden, c.dim);
  matvec(up_.data(), w.wUp.data(), xb_.data(), layout_.hidden, c.dim);
  for (int i = 0; i < layout_.hidden; ++i) {
    const float g = gate_[i];
    gate_[i] = g / (1.0f + std::exp(-g)) * up_[i];  // SwiGLU: silu(gate) * up
  }
  matvec(out_.data(), w.wDown.data(), gate_.data(), c.dim, layout_.hidden);
  allReduce_->sum(out_.data(), c.dim);
  for (int i = 0; i < c.dim; ++i) x_[i] += out_[i];
}

CpuTpModel::CpuTpModel(const ModelWeights& full, int tp) : allReduce_(tp) {
  ranks_.reserve(tp);
  for (int r = 0; r < tp; ++r) {
    ShardLayout layout = planShard(full.config, tp, r);
    ranks_.emplace_back(shardWeights(full, layout), layout, &allReduce_.rank(r));
  }
}

const std::vector<float>& CpuTpModel::forward(int token, int pos) {
  const ModelConfig& c = config();
  // Checked here so that no rank thread throws alone and leaves the others waiting.
  if (token < 0 || token >= c.vocab) throw EngineError("token " + std::to_string(token) + " out of vocabulary");
  if (pos < 0 || pos >= c.seqLen) throw EngineError("position " + std::to_string(pos) + " beyond seq_len");
  if (ranks_.size() == 1) return ranks_[0].forward(token, pos);
  // A rank that throws leaves the all-reduce, so that the others throw too
  // instead of waiting for it. Its error is the one rethrown: it is saved
  // before the abandon, and the others' errors only follow from it.
  std::mutex mutex;
  std::exception_ptr first;
  const std::vector<float>* logits = nullptr;
  auto fail = [&](std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!first) first = e;
    }
    allReduce_.abandon();
  };
  auto runRank = [&](size_t r) {
    try {
      const std::vector<float>& mine = ranks_[r].forward(token, pos);
      if (r == 0) logits = &mine;
    } catch (...) {
      fail(std::current_exception());
    }
  };
  std::vector<std::thread> threads;
  try {
    for (size_t r = 1; r < ranks_.size(); ++r) threads.emplace_back(runRank, r);
    runRank(0);
  } catch (...) {  // a thread could not start: the started ones stop at their next all-reduce
    fail(std::current_exception());
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  return *logits;
}

}  // namespace engine
