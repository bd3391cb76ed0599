#include "core/device_drain.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <future>
#include <memory>
#include <system_error>
#include <thread>

#include "core/log.h"

namespace rcn {

bool drainDevice(int cudaDev, int64_t limitMs, cudaError_t* syncError) {
  // Shared with the waiting thread, which may outlive this call.
  auto drained = std::make_shared<std::promise<cudaError_t>>();
  std::future<cudaError_t> done = drained->get_future();
  try {
    std::thread([cudaDev, drained] {
      // Whatever it returns, the device has stopped running kernels: they
      // finished, or an error left the context unable to run any.
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
  if (syncError) *syncError = result;
  return true;
}

}  // namespace rcn
