// SPDX-License-Identifier: BSD-3-Clause
// Bounded waits for CUDA work: polling a stream or event query instead of a
// synchronize call, which would wait without bound for work that may never
// finish (an NCCL kernel whose peer stopped taking part, a GPU kept busy).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>

#include "core/deadline.h"

namespace rcn {

// Asks query() (a cudaStreamQuery or cudaEventQuery) until it answers
// anything but cudaErrorNotReady, stop() holds, or the deadline passes, with
// `pause` between tries. Returns the last answer: cudaErrorNotReady when the
// wait gave up (stop() or the deadline; the caller can tell them apart).
template <typename Query, typename Stop>
cudaError_t pollCudaQuery(Deadline deadline, std::chrono::microseconds pause, Query query, Stop stop) {
  cudaError_t status = cudaErrorNotReady;
  (void)pollUntil(deadline, pause, [&] {
    status = query();
    return status != cudaErrorNotReady || stop();
  });
  return status;
}

// The same, with nothing but the deadline to stop it.
template <typename Query>
cudaError_t pollCudaQuery(Deadline deadline, std::chrono::microseconds pause, Query query) {
  return pollCudaQuery(deadline, pause, query, [] { return false; });
}

}  // namespace rcn
