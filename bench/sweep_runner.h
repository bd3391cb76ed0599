// SPDX-License-Identifier: BSD-3-Clause
// Runs one point (method, mode, size) on this rank: fresh inputs, warm-up,
// timed trials, then one checked run with poisoned outputs. Device methods are
// timed with CUDA events on one stream, eagerly or as replays of captured
// graphs; the host backend with a steady clock.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "sweep_check.h"
#include "sweep_methods.h"
#include "sweep_plan.h"
#include "sweep_results.h"
#include "sweep_stats.h"

namespace rcn::bench {

// This rank's outcome of one point, fixed-size so the bootstrap can gather it.
struct RankPoint {
  int ok = 0;
  int samples = 0;
  double median = 0, min = 0, max = 0, q1 = 0, q3 = 0;
  long long wrong = -1;
  char why[224] = {};
};

// Which input set each slot holds (sweep_check.h).
enum class InputLayout { Timed, Checked };

class PointRunner {
 public:
  // gpu false: the host backend (pools in host memory, no stream).
  PointRunner(const SweepOptions& opts, World* world, Pools* pools, bool gpu);
  ~PointRunner();
  // Sets up the stream and events; false with why on failure.
  bool init(std::string* why);
  // data: this size's inputs and reference (makeSizeData), shared by every point of the size.
  RankPoint run(SweepMethod& method, Mode mode, const PointPlan& plan, const SizeData& data);

 private:
  bool runDevice(SweepMethod& method, Mode mode, const PointPlan& plan, const SizeData& data, RankPoint* out,
                 std::string* why);
  bool runHost(SweepMethod& method, const PointPlan& plan, const SizeData& data, RankPoint* out,
               std::string* why);
  // firstSet: the input set of slot 0 in a checked run (the sets go on in turn).
  bool loadInputs(const PointPlan& plan, const SizeData& data, InputLayout layout, std::string* why, int firstSet = 0);
  bool enqueueEager(SweepMethod& method, const PointPlan& plan, int ops, int firstOp, std::string* why);
  bool captureGraphs(SweepMethod& method, const PointPlan& plan, std::string* why);
  bool launchGraphs(int launches, int first, std::string* why);
  void destroyGraphs();
  bool waitStream(const char* what, std::string* why);
  bool checkOutputs(const PointPlan& plan, const SizeData& data, long long* wrong, std::string* why, int firstSet = 0);
  void* sendSlot(const PointPlan& plan, size_t slot) const;
  void* recvSlot(const PointPlan& plan, size_t slot) const;

  const SweepOptions& opts_;
  World* world_;
  Pools* pools_;
  bool gpu_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::vector<cudaGraphExec_t> graphs_;
  std::vector<char> hostCopy_;      // a GPU's outputs copied back for the check, reused across points
  std::vector<char> hostSendCopy_;  // and its inputs, which a call must leave as they were
};

// The bound on any wait for the GPU: past it a peer has almost surely died.
inline constexpr double kGpuWaitTimeoutSec = 120.0;

}  // namespace rcn::bench
