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

bool drainDevice(int cudaDev, int64_t limitMs, cudaError_t* syncError) {
  // Shared with the waiting thread, which may outlive this call.
  auto drained = std::make_shared<std::promise<cudaError_t>>();
  std::future<cudaError_t> done = drained->get_future();
  try {
    std::thread([cudaDev, drained] {
      // Whatever it returns, the device has stopped running kernels: they
      // finished, or an error left the context unable to run any. Except
      // a capture under way on another thread, which a device-wide sync may
      // not wait past (relaxed: this thread does not take part in it).
      RelaxedCaptureScope relaxed;
      cudaError_t result = cudaSetDevice(cudaDev);
      if (result == cudaSuccess) result = cudaDeviceSynchronize();
      cudaGetLastError();  // this thread's error state, not the caller's
      drained->set_value(result);
    }).detach();
  } catch (const std::system_error& e) {
    RCN_WARN(RCN_LOG_ALL, "could not start a thread to wait for device %d: %s", cudaDev, e.what());
    return false;
  }
  if (done.wait_for(std::chrono::milliseconds(limitMs)) != std::future_status::ready) return false;
  const cudaError_t result = done.get();
  if (isCaptureError(result)) {
    RCN_WARN(RCN_LOG_ALL, "cannot wait for device %d's kernels while a CUDA graph capture is under way on it (%s): "
             "they are taken to be still running", cudaDev, cudaGetErrorString(result));
    return false;
  }
  if (syncError) *syncError = result;
  return true;
}

}  // namespace rcn
