// SPDX-License-Identifier: BSD-3-Clause
// Summaries of repeated timings: the median is what tables report, min/max and
// the interquartile range say how much the trials spread.
#pragma once

#include <vector>

namespace rcn::bench {

struct TimeStats {
  double median = 0, min = 0, max = 0, q1 = 0, q3 = 0;
  int samples = 0;
};

// Quartiles by linear interpolation between order statistics. Empty input
// gives all zeros and samples == 0.
TimeStats summarize(std::vector<double> samples);

// The element-wise worst (largest) of several ranks' summaries: a collective
// is only as fast as its slowest rank. samples is the smallest count.
TimeStats worstOf(const std::vector<TimeStats>& perRank);

}  // namespace rcn::bench
