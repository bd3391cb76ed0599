// SPDX-License-Identifier: BSD-3-Clause
// What the startup self-test's parts share (selftest.cc: the all-reduce;
// selftest_collectives.cc: all-gather and reduce-scatter): scratch buffers on
// the communicator's device, bounded batch timing and the every-rank
// agreement.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/device_memory.h"
#include "core/policy.h"
#include "rocenante/rocenante.h"

struct rcnComm;

namespace rcn {

// Rank r contributes (r+1)*(i%13+1): small integers, so every summation
// order gives the same float bits.
inline float patternValue(int rank, size_t i) { return static_cast<float>((rank + 1) * (i % 13 + 1)); }

inline float expectedValue(int nranks, size_t i) {
  return static_cast<float>((i % 13 + 1) * (nranks * (nranks + 1) / 2));
}

constexpr int kWarmup = 3;
constexpr int kBatches = 5;
constexpr int kPerBatch = 8;

// Buffers and a stream on the comm's device, or host memory on the host backend.
class TestBuffers {
 public:
  explicit TestBuffers(bool device) : device_(device) {}
  ~TestBuffers() {
    if (stuck) return;  // freeing would wait for the stuck work: leak instead
    if (device_) {
      if (stream) cudaStreamSynchronize(stream);
      freeScratch(send, stream);
      freeScratch(recv, stream);
      if (start) cudaEventDestroy(start);
      if (stop) cudaEventDestroy(stop);
      if (stream) cudaStreamDestroy(stream);
    } else {
      free(send);
      free(recv);
    }
  }
  rcnResult_t allocate(size_t bytes) {
    if (!device_) {
      send = malloc(bytes);
      recv = malloc(bytes);
      return send && recv ? rcnSuccess : rcnSystemError;
    }
    RCN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    RCN_CUDA_CHECK(cudaEventCreate(&start));
    RCN_CUDA_CHECK(cudaEventCreate(&stop));
    RCN_CHECK(allocScratch(&send, bytes, stream));
    RCN_CHECK(allocScratch(&recv, bytes, stream));
    return rcnSuccess;
  }
  rcnResult_t upload(void* dst, const void* src, size_t bytes) {
    if (!device_) return memcpy(dst, src, bytes), rcnSuccess;
    // On the test's stream and waited for: a plain cudaMemcpy from pageable
    // memory may return before its last bytes land, and the non-blocking
    // stream would not wait for them.
    RCN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    RCN_CUDA_CHECK(cudaStreamSynchronize(stream));
    return rcnSuccess;
  }
  rcnResult_t download(void* dst, const void* src, size_t bytes) {
    if (!device_) return memcpy(dst, src, bytes), rcnSuccess;
    RCN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
    RCN_CUDA_CHECK(cudaStreamSynchronize(stream));
    return rcnSuccess;
  }
  void* send = nullptr;
  void* recv = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bool stuck = false;  // a wait for the stream gave up: work on it may never finish

 private:
  bool device_;
};

// Waits for the batch's stop event, bounded like creation's other waits for a
// peer (ROCENANTE_BOOTSTRAP_TIMEOUT_MS): our kernels give up by themselves,
// but an NCCL kernel whose peer stopped taking part (it failed, or died)
// never finishes.
rcnResult_t waitForBatch(TestBuffers& buf);

// Microseconds per call of `call` in its fastest batch on the test stream.
// The fastest, for both paths: what slows a batch (a host thread descheduled
// between eager launches, clocks still ramping up) is noise on top of what a
// path costs, and it struck one path or the other at random.
template <typename Call>
inline rcnResult_t timeFastest(TestBuffers& buf, Call call, double* us) {
  for (int i = 0; i < kWarmup; ++i) RCN_CHECK(call());
  *us = std::numeric_limits<double>::infinity();
  for (int b = 0; b < kBatches; ++b) {
    RCN_CUDA_CHECK(cudaEventRecord(buf.start, buf.stream));
    for (int i = 0; i < kPerBatch; ++i) RCN_CHECK(call());
    RCN_CUDA_CHECK(cudaEventRecord(buf.stop, buf.stream));
    RCN_CHECK(waitForBatch(buf));
    float ms = 0;
    RCN_CUDA_CHECK(cudaEventElapsedTime(&ms, buf.start, buf.stop));
    *us = std::min(*us, 1000.0 * ms / kPerBatch);
  }
  return rcnSuccess;
}

// Whether `result` is rcnSuccess on every rank (one bootstrap all-gather, so
// bounded): a rank that stopped would leave its peers' next calls waiting, and
// NCCL's wait without bound, so every rank takes this step even after a local
// error.
rcnResult_t agreeEveryRankOk(rcnComm* comm, rcnResult_t result);

// Allocates `buf` for `bytes`, then agrees with every rank that all did
// (agreeEveryRankOk), so no rank launches a kernel while a peer is still
// preparing. Some CUDA calls wait for every kernel on the device (cudaFree,
// and a kernel's first launch when CUDA loads it lazily, both measured on an
// H200): a rank inside one while a peer sharing its GPU waits for it in a
// kernel would stall both until the kernels' timeout. And a rank that could
// not allocate is known to all before anyone waits for it.
rcnResult_t allocateOnEveryRank(rcnComm* comm, TestBuffers& buf, size_t bytes);

// Whether this rank must report `coll`'s self-test failed
// (ROCENANTE_SELFTEST_FAIL_RANK and ROCENANTE_SELFTEST_FAIL_COLLECTIVE).
bool selfTestFailsHere(const rcnComm* comm, Collective coll);

}  // namespace rcn
