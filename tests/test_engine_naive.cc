// SPDX-License-Identifier: BSD-3-Clause
// The engine's forward pass recomputed naively for the tests (see the header).
#include "test_engine_naive.h"

#include <algorithm>
#include <cmath>

namespace enginetest {

using namespace engine;

// The logits after tokens[0..n], recomputed from scratch in double precision
// with no KV cache and no shared code with CpuModel: every position's keys
// and values are derived again from the embeddings.
std::vector<double> naiveLogits(const ModelWeights& m, const std::vector<int>& tokens) {
  const ModelConfig& c = m.config;
  const int n = int(tokens.size()), hd = c.headDim, group = c.heads / c.kvHeads;
  auto mul = [](const std::vector<float>& W, const std::vector<double>& x, int rows) {
    const size_t cols = x.size();
    std::vector<double> y(rows, 0.0);
    for (int r = 0; r < rows; ++r)
      for (size_t i = 0; i < cols; ++i) y[r] += double(W[r * cols + i]) * x[i];
    return y;
  };
  auto norm = [&](const std::vector<double>& x, const std::vector<float>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    double scale = 1.0 / std::sqrt(ss / x.size() + c.normEps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
    return y;
  };
  auto rotate = [&](std::vector<double>& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double freq = c.ropeFreqs.empty() ? std::pow(double(c.ropeTheta), -2.0 * i / hd) : c.ropeFreqs[i];
        double angle = pos * freq;
        int a = h * hd + (c.ropeInterleaved ? 2 * i : i);
        int b = h * hd + (c.ropeInterleaved ? 2 * i + 1 : i + hd / 2);
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
        v[b] = x0 * std::sin(angle) + x1 * std::cos(angle);
      }
  };
  auto headNorm = [&](std::vector<double>& v, int heads, const std::vector<float>& w) {
    for (int h = 0; h < heads; ++h) {
      std::vector<double> head(v.begin() + h * hd, v.begin() + (h + 1) * hd);
      head = norm(head, w);
      std::copy(head.begin(), head.end(), v.begin() + h * hd);
    }
  };

  std::vector<std::vector<double>> x(n, std::vector<double>(c.dim));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < c.dim; ++i) x[t][i] = m.embedding[size_t(tokens[t]) * c.dim + i];
  for (const LayerWeights& w : m.layers) {
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      std::vector<double> xb = norm(x[t], w.attnNorm);
      q[t] = mul(w.wq, xb, c.heads * hd);
      k[t] = mul(w.wk, xb, c.kvHeads * hd);
      v[t] = mul(w.wv, xb, c.kvHeads * hd);
      if (c.qkvBias) {
        for (int i = 0; i < c.heads * hd; ++i) q[t][i] += w.bq[i];
        for (int i = 0; i < c.kvHeads * hd; ++i) k[t][i] += w.bk[i], v[t][i] += w.bv[i];
      }
      if (c.qkNorm) {
        headNorm(q[t], c.heads, w.qNorm);
        headNorm(k[t], c.kvHeads, w.kNorm);
      }
      rotate(q[t], c.heads, t);
      rotate(k[t], c.kvHeads, t);
    }
    for (int t = 0; t < n; ++t) {
      std::vector<double> att(c.heads * hd, 0.0);
      for (int h = 0; h < c.heads; ++h) {
        const int kvh = h / group;
        std::vector<double> p(t + 1);
        double mx = -1e300, sum = 0;
        for (int s = 0; s <= t; ++s) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += q[t][h * hd + i] * k[s][kvh * hd + i];
          p[s] = dot / std::sqrt(double(hd));
          mx = std::max(mx, p[s]);
        }
        for (double& e : p) sum += e = std::exp(e - mx);
        for (int s = 0; s <= t; ++s)
          for (int i = 0; i < hd; ++i) att[h * hd + i] += p[s] / sum * v[s][kvh * hd + i];
      }
      std::vector<double> o = mul(w.wo, att, c.dim);
      for (int i = 0; i < c.dim; ++i) x[t][i] += o[i];
      std::vector<double> xb = norm(x[t], w.ffnNorm);
      std::vector<double> g = mul(w.wGate, xb, c.hidden), u = mul(w.wUp, xb, c.hidden);
      for (int i = 0; i < c.hidden; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      std::vector<double> d = mul(w.wDown, g, c.dim);
      for (int i = 0; i < c.dim; ++i) x[t][i] += d[i];
    }
  }
  return mul(m.lmHead(), norm(x[n - 1], m.finalNorm), c.vocab);
}

}  // namespace enginetest
