// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_plan.h"

#include <algorithm>

namespace rcn::bench {

PointPlan planPoint(size_t bytes, size_t elemSize, size_t poolBytes, int opsPerGraph, bool rotate) {
  PointPlan p;
  p.bytes = bytes;
  p.count = elemSize ? bytes / elemSize : 0;
  p.stride = (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  p.slots = rotate && p.stride ? std::clamp<size_t>(poolBytes / p.stride, 1, kMaxSlots) : 1;
  p.opsPerGraph = std::max(1, opsPerGraph);
  size_t k = static_cast<size_t>(p.opsPerGraph);
  size_t ops = bytes ? (kTrialBytes + bytes - 1) / bytes : k;
  ops = std::clamp(ops, k, 10 * k);
  ops = (ops + k - 1) / k * k;
  p.opsPerTrial = static_cast<int>(ops);
  p.warmupOps = static_cast<int>(std::max(k, ops / 4));
  p.graphs = static_cast<int>((p.slots + k - 1) / k);
  return p;
}

}  // namespace rcn::bench
