// SPDX-License-Identifier: BSD-3-Clause
// A stream kept busy by a host function until release(), or until a bound
// passes (so a failing test cannot hold the GPU for good): work that is not
// rocenante's and does not finish, as in life an NCCL collective whose peer
// died or a model running on another stream. Whatever waits for the whole
// device, or, on a blocking stream, for the legacy stream, waits for it.
// drain() (and the destructor, on every way out of a test) releases it and
// waits for the stream, so the host function never outlives the object it reads.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace rcn::test {

class StreamHold {
 public:
  explicit StreamHold(std::chrono::milliseconds bound) : bound_(bound) {}
  ~StreamHold() { drain(); }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;

  cudaError_t hold(cudaStream_t stream) {
    stream_ = stream;
    return cudaLaunchHostFunc(stream, run, this);
  }
  void release() { released_ = true; }
  cudaError_t drain() {
    release();
    const cudaError_t e = stream_ ? cudaStreamSynchronize(stream_) : cudaSuccess;
    stream_ = nullptr;
    return e;
  }

 private:
  static void CUDART_CB run(void* self) {
    auto* h = static_cast<StreamHold*>(self);
    const auto until = std::chrono::steady_clock::now() + h->bound_;
    while (!h->released_.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::atomic<bool> released_{false};
  std::chrono::milliseconds bound_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace rcn::test
