// SPDX-License-Identifier: BSD-3-Clause
#include "core/device_memory.h"

#include <map>
#include <mutex>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/cuda_poll.h"
#include "core/log.h"

namespace rcn {
namespace {

// The pool scratch memory comes from on `dev`, made once per device and
// kept for the process; null where the device has no memory pools (or one
// could not be made). Every device with peer access to `dev` may read and
// write it, as it may cudaMalloc memory once peer access is on: NCCL moves
// data straight into the buffers of a rank in the same process.
cudaMemPool_t scratchPool(int dev) {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mutex);
  auto known = pools.find(dev);
  if (known != pools.end()) return known->second;
  cudaMemPool_t pool = nullptr;
  int supported = 0, devices = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev) == cudaSuccess && supported &&
      cudaGetDeviceCount(&devices) == cudaSuccess) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) pool = nullptr;
    for (int peer = 0; pool && peer < devices; ++peer) {
      int canAccess = 0;
      if (peer == dev || cudaDeviceCanAccessPeer(&canAccess, peer, dev) != cudaSuccess || !canAccess) continue;
      cudaMemAccessDesc access = {};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = peer;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      if (cudaMemPoolSetAccess(pool, &access, 1) != cudaSuccess)
        RCN_INFO(RCN_LOG_INIT, "scratch pool of GPU %d: peer GPU %d gets no access", dev, peer);
    }
  }
  cudaGetLastError();  // a device without pools is not an error
  pools[dev] = pool;
  return pool;
}

}  // namespace

// Runs enqueue(stream) on a private stream and waits for that stream alone,
// at most ROCENANTE_BOOTSTRAP_TIMEOUT_MS; `what` names the work in the warning.
template <typename Enqueue>
rcnResult_t onPrivateStream(const char* what, Enqueue enqueue) {
  cudaStream_t stream = nullptr;
  RCN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaError_t status = enqueue(stream);
  const int64_t limitMs = bootstrapTimeoutMs();
  if (status == cudaSuccess)
    status = pollCudaQuery(deadlineAfterMs(limitMs), std::chrono::microseconds(20),
                           [&] { return cudaStreamQuery(stream); });
  cudaStreamDestroy(stream);  // work still pending completes first
  if (status == cudaErrorNotReady) {
    RCN_WARN(RCN_LOG_INIT, "%s did not finish within %lld ms (ROCENANTE_BOOTSTRAP_TIMEOUT_MS): the GPU runs "
             "other work that does not make room", what, (long long)limitMs);
    return rcnSystemError;
  }
  RCN_CUDA_CHECK(status);
  return rcnSuccess;
}

rcnResult_t zeroDeviceMemory(void* ptr, size_t bytes) {
  return onPrivateStream("zeroing a new exchange region",
                         [&](cudaStream_t stream) { return cudaMemsetAsync(ptr, 0, bytes, stream); });
}

// A pageable source is staged before cudaMemcpyAsync returns, so it may go
// out of scope even if the copy is still pending at the time limit.
rcnResult_t copyToDeviceMemory(void* dst, const void* src, size_t bytes) {
  return onPrivateStream("copying a new communicator's state to the GPU", [&](cudaStream_t stream) {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream);
  });
}

rcnResult_t allocScratch(void** ptr, size_t bytes, cudaStream_t stream) {
  int dev = 0;
  RCN_CUDA_CHECK(cudaGetDevice(&dev));
  if (cudaMemPool_t pool = scratchPool(dev)) RCN_CUDA_CHECK(cudaMallocFromPoolAsync(ptr, bytes, pool, stream));
  else RCN_CUDA_CHECK(cudaMalloc(ptr, bytes));
  return rcnSuccess;
}

void freeScratch(void* ptr, cudaStream_t stream) {
  if (!ptr) return;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = scratchPool(dev) ? cudaFreeAsync(ptr, stream) : cudaFree(ptr);
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
