// SPDX-License-Identifier: BSD-3-Clause
// What one sweep measured: one Point per (method, mode, size), plus why any
// method could not run. Filled on rank 0 from every rank's timings.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "rocenante/rocenante.h"
#include "sweep_methods_list.h"
#include "sweep_stats.h"

namespace rcn::bench {

enum class Mode { Graph = 0, Eager = 1 };
inline const char* modeName(Mode m) { return m == Mode::Graph ? "graph" : "eager"; }

struct Point {
  int method = 0;            // index into kMethods
  Mode mode = Mode::Eager;
  size_t bytes = 0;
  size_t count = 0;
  bool measured = false;     // false: n/a, see note
  std::string note;          // why it was not measured (or a remark)
  TimeStats us;              // microseconds per all-reduce, worst rank
  long long wrong = -1;      // elements that differ from the CPU reference, all ranks; -1: not checked
};

struct SweepResults {
  int nranks = 0;
  rcnDataType_t dtype = rcnBfloat16;
  rcnRedOp_t op = rcnSum;
  std::string backend;       // "gpu" or "host"
  std::vector<std::pair<std::string, std::string>> meta;  // host, GPU, versions, command, date, note
  std::vector<std::string> methodUnavailable;  // per method: empty, or why it never ran
  std::vector<Point> points;
};

}  // namespace rcn::bench
