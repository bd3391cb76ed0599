#include "core/device_memory.h"

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/deadline.h"
#include "core/log.h"

namespace rcn {
namespace {

// Whether the current device serves cudaMallocAsync (a per-device property).
bool hasMemoryPools() {
  int dev = 0, pools = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return pools != 0;
}

// Polls `stream` until its work is done or limitMs passes; `what` names the
// work in the WARN.
rcnResult_t waitForStream(cudaStream_t stream, int64_t limitMs, const char* what) {
  cudaError_t status = cudaErrorNotReady;
  const bool answered = pollUntil(deadlineAfterMs(limitMs), std::chrono::microseconds(20), [&] {
    status = cudaStreamQuery(stream);
    return status != cudaErrorNotReady;
  });
  if (!answered) {
    RCN_WARN(RCN_LOG_INIT, "%s did not finish within %lld ms (ROCENANTE_BOOTSTRAP_TIMEOUT_MS): the GPU runs other work that does not make room",
             what, (long long)limitMs);
    return rcnSystemError;
  }
  RCN_CUDA_CHECK(status);
  return rcnSuccess;
}

}  // namespace

rcnResult_t zeroDeviceMemory(void* ptr, size_t bytes) {
  cudaStream_t stream = nullptr;
  RCN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  rcnResult_t result = rcnSuccess;
  cudaError_t err = cudaMemsetAsync(ptr, 0, bytes, stream);
  if (err != cudaSuccess) {
    RCN_WARN(RCN_LOG_INIT, "cudaMemsetAsync of %zu bytes failed: %s", bytes, cudaGetErrorString(err));
    result = rcnUnhandledCudaError;
  } else {
    result = waitForStream(stream, bootstrapTimeoutMs(), "zeroing a new exchange region");
  }
  cudaStreamDestroy(stream);  // a memset still pending completes first
  return result;
}

rcnResult_t allocScratch(void** ptr, size_t bytes, cudaStream_t stream) {
  if (hasMemoryPools()) RCN_CUDA_CHECK(cudaMallocAsync(ptr, bytes, stream));
  else RCN_CUDA_CHECK(cudaMalloc(ptr, bytes));
  return rcnSuccess;
}

void freeScratch(void* ptr, cudaStream_t stream) {
  if (!ptr) return;
  cudaError_t err = hasMemoryPools() ? cudaFreeAsync(ptr, stream) : cudaFree(ptr);
  if (err != cudaSuccess) RCN_WARN(RCN_LOG_INIT, "freeing scratch memory failed: %s", cudaGetErrorString(err));
}

RelaxedCaptureScope::RelaxedCaptureScope() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  changed_ = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  saved_ = mode;
}

RelaxedCaptureScope::~RelaxedCaptureScope() {
  if (changed_) cudaThreadExchangeStreamCaptureMode(&saved_);
}

}  // namespace rcn
