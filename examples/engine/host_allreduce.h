// SPDX-License-Identifier: BSD-3-Clause
// The CPU path's all-reduce across processes: rcnAllReduce on host float32
// buffers. The communicator runs rocenante's host backend (the library picks
// it without a GPU, or with ROCENANTE_BACKEND=host), which sums the partials
// in rank order, so every rank gets bit-identical results.
#pragma once

#include "allreduce_hook.h"
#include "rcn_result.h"

namespace engine {

class RcnHostAllReduce : public AllReduceHook {
 public:
  explicit RcnHostAllReduce(rcnComm_t comm) : comm_(comm) {}
  void sum(float* data, size_t count) override {
    rcnCheck(rcnAllReduce(data, data, count, rcnFloat32, rcnSum, comm_, nullptr), "rcnAllReduce (host)");
  }

 private:
  rcnComm_t comm_;
};

}  // namespace engine
