// SPDX-License-Identifier: BSD-3-Clause
#include "support/residual_norm_reference.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "core/residual_norm_host.h"
#include "support/reference.h"

namespace rcn::test {

namespace {

size_t elemBytes(rcnDataType_t t) { return t == rcnFloat8e4m3 ? 1 : 2; }

void fillUniform(std::vector<uint8_t>* buf, size_t count, rcnDataType_t t, double lo, double hi, std::mt19937_64& rng) {
  buf->assign(count * elemBytes(t), 0);
  std::uniform_real_distribution<double> value(lo, hi);
  for (size_t i = 0; i < count; ++i) storeElement(buf->data(), i, t, value(rng));
}

// Half the spacing of the values of type t next to |v|: the most one
// rounding to nearest can move v (the larger binade's at a power of two).
double halfUlp(double v, rcnDataType_t t) {
  const int mantissa = t == rcnBfloat16 ? 7 : t == rcnFloat16 ? 10 : 3;
  const int minExp = t == rcnBfloat16 ? -126 : t == rcnFloat16 ? -14 : -6;
  int e = std::ilogb(std::fabs(v));
  if (v == 0 || e < minExp) e = minExp;
  return std::ldexp(1.0, e - mantissa - 1);
}

std::string bad(const char* what, size_t i, double got, double want, double bound) {
  char text[200];
  std::snprintf(text, sizeof text, "%s[%zu] = %.9g, fp64 reference %.9g (bound %.3g)", what, i, got, want, bound);
  return text;
}

}  // namespace

std::string describe(const NormCase& c) {
  char text[160];
  std::snprintf(text, sizeof text, "%zu x %zu %s -> %s eps %g scale %g", c.tokens, c.hidden,
                c.dtype == rcnBfloat16 ? "bf16" : "fp16",
                c.normType == rcnFloat8e4m3 ? "e4m3"
                : c.normType == rcnBfloat16 ? "bf16"
                                            : "fp16",
                c.eps, c.scale);
  return text;
}

NormInputs makeNormInputs(const NormCase& c, int nranks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  NormInputs in;
  const size_t count = c.tokens * c.hidden;
  in.partial.resize(nranks);
  for (auto& p : in.partial) fillUniform(&p, count, c.dtype, -2.0, 2.0, rng);
  fillUniform(&in.residual, count, c.dtype, -4.0, 4.0, rng);
  fillUniform(&in.weight, c.hidden, c.dtype, 0.25, 1.75, rng);
  return in;
}

NormOutputs expectedNormOutputs(const NormCase& c, const NormInputs& in) {
  const size_t count = c.tokens * c.hidden;
  // rcnAllReduce's bits: fp32 sum in rank order, rounded once to the dtype.
  std::vector<uint8_t> sum(count * elemBytes(c.dtype));
  for (size_t i = 0; i < count; ++i) {
    float acc = 0.0f;
    for (size_t r = 0; r < in.partial.size(); ++r) {
      const float x = static_cast<float>(loadElement(in.partial[r].data(), i, c.dtype));
      acc = r == 0 ? x : acc + x;
    }
    storeElement(sum.data(), i, c.dtype, acc);
  }
  NormOutputs out{in.residual, std::vector<uint8_t>(count * elemBytes(c.normType))};
  const ResidualNormCall call =
      residualNormCall(nullptr, out.residual.data(), in.weight.data(), out.normOut.data(), c.tokens, c.hidden, c.dtype,
                       c.normType, c.normType == rcnFloat8e4m3 ? &c.scale : nullptr, c.eps);
  hostResidualNorm(call, sum.data());
  return out;
}

std::string checkNormAgainstFp64(const NormCase& c, const NormInputs& in, const NormOutputs& got) {
  for (size_t row = 0; row < c.tokens; ++row) {
    double squares = 0;
    for (size_t j = 0; j < c.hidden; ++j) {
      const size_t i = row * c.hidden + j;
      double sum = 0;
      for (const auto& p : in.partial) sum += loadElement(p.data(), i, c.dtype);
      const double residual = loadElement(in.residual.data(), i, c.dtype) + sum;
      const double mine = loadElement(got.residual.data(), i, c.dtype);
      // The sum rounded to the dtype (as the all-reduce's output), then the add.
      const double bound =
          halfUlp(sum, c.dtype) + halfUlp(std::fabs(residual) + halfUlp(sum, c.dtype), c.dtype) + 1e-6 * std::fabs(sum);
      if (!(std::fabs(mine - residual) <= bound)) return bad("residual", i, mine, residual, bound);
      squares += mine * mine;
    }
    const double inv = 1.0 / std::sqrt(squares / double(c.hidden) + double(c.eps));
    for (size_t j = 0; j < c.hidden; ++j) {
      const size_t i = row * c.hidden + j;
      double want = loadElement(got.residual.data(), i, c.dtype) * inv * loadElement(in.weight.data(), j, c.dtype);
      if (c.normType == rcnFloat8e4m3) want = std::fmax(-448.0, std::fmin(448.0, want / double(c.scale)));
      const double mine = loadElement(got.normOut.data(), i, c.normType);
      // One rounding to the output, plus fp32's few ulps in the scale and products.
      const double bound = halfUlp(want, c.normType) + 4e-6 * std::fabs(want);
      if (!(std::fabs(mine - want) <= bound)) return bad("normOut", i, mine, want, bound);
    }
  }
  return "";
}

std::string firstDifference(const NormOutputs& a, const NormOutputs& b) {
  for (const auto* pair : {&a.residual, &a.normOut}) {
    const auto& x = *pair;
    const auto& y = pair == &a.residual ? b.residual : b.normOut;
    const char* name = pair == &a.residual ? "residual" : "normOut";
    if (x.size() != y.size()) return std::string(name) + ": sizes differ";
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i]) {
        char text[120];
        std::snprintf(text, sizeof text, "%s byte %zu: %02x vs %02x", name, i, x[i], y[i]);
        return text;
      }
  }
  return "";
}

}  // namespace rcn::test
