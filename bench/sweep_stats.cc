// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_stats.h"

#include <algorithm>

namespace rcn::bench {
namespace {

// The p-quantile (0..1) of sorted values.
double quantile(const std::vector<double>& sorted, double p) {
  double pos = p * static_cast<double>(sorted.size() - 1);
  size_t below = static_cast<size_t>(pos);
  if (below + 1 >= sorted.size()) return sorted.back();
  double frac = pos - static_cast<double>(below);
  return sorted[below] + frac * (sorted[below + 1] - sorted[below]);
}

}  // namespace

TimeStats summarize(std::vector<double> samples) {
  TimeStats s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.samples = static_cast<int>(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  s.median = quantile(samples, 0.5);
  s.q1 = quantile(samples, 0.25);
  s.q3 = quantile(samples, 0.75);
  return s;
}

TimeStats worstOf(const std::vector<TimeStats>& perRank) {
  TimeStats w;
  if (perRank.empty()) return w;
  w = perRank.front();
  for (const TimeStats& s : perRank) {
    w.median = std::max(w.median, s.median);
    w.min = std::max(w.min, s.min);
    w.max = std::max(w.max, s.max);
    w.q1 = std::max(w.q1, s.q1);
    w.q3 = std::max(w.q3, s.q3);
    w.samples = std::min(w.samples, s.samples);
  }
  return w;
}

}  // namespace rcn::bench
