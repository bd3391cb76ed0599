// SPDX-License-Identifier: BSD-3-Clause
// Turning results into what users read: nccl-tests-style tables, the CSV and
// JSON files, speedups and the crossover where rocenante stops winning.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sweep_results.h"

namespace rcn::bench {

// GB/s the way nccl-tests counts them: algbw = bytes / time, and
// busbw = algbw * 2(n-1)/n for all-reduce (what each link carries).
double algBandwidthGBs(size_t bytes, double us);
double busBandwidthGBs(size_t bytes, double us, int nranks);

// The measured point, or nullptr.
const Point* findPoint(const SweepResults& r, int method, Mode mode, size_t bytes);

// baseline time / method time at one size; 0 when either was not measured.
double speedupOver(const SweepResults& r, const Point& p, const char* baselineMethod);

// Where a method stops beating the fastest measured NCCL method at each size.
struct Crossover {
  int method = -1;
  Mode mode = Mode::Graph;
  bool compared = false;   // at least one size had both measured
  size_t winsUpTo = 0;     // largest size such that it won at every compared size up to it (0: none)
  size_t firstLoss = 0;    // first compared size where it did not win (0: it won everywhere)
  size_t smallestCompared = 0;
  size_t largestCompared = 0;
};
// A win needs a verified result (#wrong == 0, or unchecked) and a smaller median.
Crossover findCrossover(const SweepResults& r, int method, Mode mode);

// The fastest NCCL method at one size (index), or -1 if none was measured.
int bestNcclAt(const SweepResults& r, Mode mode, size_t bytes);

// The NCCL method accepted by `eligible` whose verified median at one size
// is below incumbentUs (the time to beat, that of method `incumbent`), the
// fastest such; `incumbent` when none is (-1: no incumbent, any time wins).
int fastestNcclAt(const SweepResults& r, Mode mode, size_t bytes,
                  const std::function<bool(int method)>& eligible, int incumbent, double incumbentUs);

// Every size in the results, ascending.
std::vector<size_t> resultSizes(const SweepResults& r);

// One block per method with nccl-tests' columns plus the spread and speedups,
// then a one-line-per-size comparison and the crossovers. Only modes present.
std::string formatTables(const SweepResults& r);
// Just the crossover lines ("rocenante one-shot beats NCCL up to ...").
std::string formatCrossovers(const SweepResults& r);

std::string toCsv(const SweepResults& r);
std::string toJson(const SweepResults& r);

// Escapes text for a JSON string (quotes not included).
std::string jsonEscape(const std::string& text);

}  // namespace rcn::bench
