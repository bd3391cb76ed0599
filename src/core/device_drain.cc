// SPDX-License-Identifier: BSD-3-Clause
#include "core/device_drain.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <future>
#include <memory>
#include <system_error>
#include <thread>

#include "core/device_memory.h"
#include "core/log.h"

namespace rcn {

namespace {

bool isCaptureError(cudaError_t e) {
  switch (e) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread:
      return true;
    default:
      return false;
  }
}

}  // namespace

Drained drainDevice(int cudaDev, int64_t limitMs, cudaError_t* syncError, std::string* whyNot) {
  std::string unused;
  if (!whyNot) whyNot = &unused;
  // Shared with the waiting thread, which may outlive this call.
  auto drained = std::make_shared<std::promise<cudaError_t>>();
  std::future<cudaError_t> done = drained->get_future();
  try {
    std::thread([cudaDev, drained] {
      // Whatever it returns, the device has stopped running kernels: they
      // finished, or an error left the context unable to run any. Except
      // a capture under way on another thread, which refuses the sync.
      RelaxedCaptureScope relaxed;
      cudaError_t result = cudaSetDevice(cudaDev);
      if (result == cudaSuccess) result = cudaDeviceSynchronize();
      cudaGetLastError();  // this thread's error state, not the caller's
      drained->set_value(result);
    }).detach();
  } catch (const std::system_error& e) {
    *whyNot = std::string("no thread could be started to wait for it (") + e.what() + ")";
    return Drained::CannotTell;
  }
  if (done.wait_for(std::chrono::milliseconds(limitMs)) != std::future_status::ready) {
    *whyNot = "it still runs kernels after " + std::to_string(limitMs) + " ms (ROCENANTE_TIMEOUT_MS)";
    return Drained::TimedOut;
  }
  const cudaError_t result = done.get();
  if (isCaptureError(result)) {  // nothing says our kernels finished
    *whyNot = std::string("a CUDA graph capture is under way on it, and CUDA permits no wait for the whole device "
                          "then (") + cudaGetErrorString(result) + "; that capture is invalidated)";
    return Drained::CannotTell;
  }
  if (syncError) *syncError = result;
  return Drained::Yes;
}

}  // namespace rcn
