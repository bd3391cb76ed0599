// SPDX-License-Identifier: BSD-3-Clause
#include "core/bootstrap_nccl.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/cuda_poll.h"
#include "core/device_memory.h"
#include "core/device_scope.h"
#include "core/nccl_lib.h"
#include "core/params.h"

namespace rcn {
namespace {

constexpr uint64_t kHeaderMagic = 0x6e63636c62747370ull;  // "ncclbtsp"

struct Header {
  uint64_t magic;
  uint64_t seq;
  uint64_t bytes;
  uint64_t reserved;  // zero
};
static_assert(sizeof(Header) == 32, "header is exchanged as 32 raw bytes");


class NcclBootstrapImpl : public NcclBootstrap {
 public:
  NcclBootstrapImpl(ncclComm_t comm, int rank, int nranks, int cudaDev)
      : comm_(comm), rank_(rank), nranks_(nranks), cudaDev_(cudaDev) {}

  ~NcclBootstrapImpl() override {
    DeviceScope scope(cudaDev_);
    // A timed-out exchange may still be queued; never free under it.
    if (stream_ && !broken_) cudaStreamSynchronize(stream_);
    if (!broken_) {
      if (buffer_) freeScratch(buffer_, stream_);
      if (stream_) cudaStreamDestroy(stream_);
    }
  }

  rcnResult_t init() {
    RCN_CHECK(ncclApi(&nccl_));
    DeviceScope scope(cudaDev_);
    RCN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    return rcnSuccess;
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

  rcnResult_t allGather(void* data, size_t bytes) override {
    if (closed_) {
      RCN_WARN(RCN_LOG_BOOTSTRAP,
               "bootstrap over NCCL comm %p is closed: rocenante issues no collectives on the "
               "user's communicator after init",
               (void*)comm_);
      return rcnInvalidUsage;
    }
    if (broken_ || aborted_) {
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap over NCCL comm %p is %s", (void*)comm_,
               aborted_ ? "aborted" : "broken by an earlier failed exchange");
      return rcnRemoteError;
    }
    DeviceScope scope(cudaDev_);
    std::vector<Header> headers(nranks_);
    headers[rank_] = Header{kHeaderMagic, seq_, bytes, 0};
    RCN_CHECK(exchange(headers.data(), sizeof(Header)));
    for (int r = 0; r < nranks_; ++r) {
      const Header& h = headers[r];
      if (h.magic != kHeaderMagic || h.reserved != 0 || h.seq != seq_ || h.bytes != bytes) {
        broken_ = true;
        RCN_WARN(RCN_LOG_BOOTSTRAP,
                 "bootstrap over NCCL: rank %d is out of step at exchange %llu (it sent seq %llu, "
                 "%llu bytes; this rank %d expected %zu bytes): a rank failed during init",
                 r, (unsigned long long)seq_, (unsigned long long)h.seq,
                 (unsigned long long)h.bytes, rank_, bytes);
        return rcnRemoteError;
      }
    }
    ++seq_;
    return bytes == 0 ? rcnSuccess : exchange(data, bytes);
  }

  void abort() override { aborted_ = true; }
  void close() override { closed_ = true; }

 private:
  // One in-place ncclAllGather of `bytes` per rank through the device buffer.
  rcnResult_t exchange(void* data, size_t bytes) {
    size_t total = bytes * static_cast<size_t>(nranks_);
    RCN_CHECK(reserve(total));
    char* mine = static_cast<char*>(buffer_) + bytes * rank_;
    RCN_CUDA_CHECK(cudaMemcpyAsync(mine, static_cast<char*>(data) + bytes * rank_, bytes,
                                   cudaMemcpyHostToDevice, stream_));
    ncclResult_t res = nccl_->allGather(mine, buffer_, bytes, ncclUint8, comm_, stream_);
    if (res != ncclSuccess) {
      broken_ = true;
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap over NCCL: ncclAllGather failed: %s",
               nccl_->getErrorString(res));
      return fromNccl(res);
    }
    // Wait (bounded) before copying back: a copy into pageable memory would
    // block the host until the all-gather finished, however long that takes.
    RCN_CHECK(waitStream());
    RCN_CUDA_CHECK(cudaMemcpyAsync(data, buffer_, total, cudaMemcpyDeviceToHost, stream_));
    RCN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return rcnSuccess;
  }

  rcnResult_t reserve(size_t total) {
    if (total <= capacity_) return rcnSuccess;
    if (buffer_) {
      RCN_CUDA_CHECK(cudaStreamSynchronize(stream_));
      freeScratch(buffer_, stream_);
      buffer_ = nullptr;
    }
    size_t want = total < 4096 ? 4096 : total;
    RCN_CHECK(allocScratch(&buffer_, want, stream_));
    capacity_ = want;
    return rcnSuccess;
  }

  // Polls the stream until done, the bound passes, or abort() is called.
  rcnResult_t waitStream() {
    const int64_t limitMs = bootstrapTimeoutMs();
    const cudaError_t status = pollCudaQuery(deadlineAfterMs(limitMs), std::chrono::microseconds(20),
                                             [&] { return cudaStreamQuery(stream_); }, [&] { return aborted_.load(); });
    if (status == cudaSuccess) return rcnSuccess;
    broken_ = true;
    if (status != cudaErrorNotReady) {
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap over NCCL: CUDA error '%s' while waiting",
               cudaGetErrorString(status));
      return rcnUnhandledCudaError;
    }
    if (aborted_) return rcnRemoteError;  // abort() was called: no fault to report
    RCN_WARN(RCN_LOG_BOOTSTRAP,
             "bootstrap over NCCL comm %p: exchange %llu did not complete within %lld ms "
             "(ROCENANTE_BOOTSTRAP_TIMEOUT_MS); a rank did not take part",
             (void*)comm_, (unsigned long long)seq_, (long long)limitMs);
    return rcnRemoteError;
  }

  ncclComm_t comm_;
  int rank_;
  int nranks_;
  int cudaDev_;
  const NcclApi* nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
  uint64_t seq_ = 0;
  bool broken_ = false;
  bool closed_ = false;
  std::atomic<bool> aborted_{false};
};

}  // namespace

rcnResult_t bootstrapInitNccl(ncclComm_t comm, int rank, int nranks, int cudaDev,
                              std::unique_ptr<NcclBootstrap>* out) {
  RCN_ARG_CHECK(comm != nullptr, "bootstrap over NCCL: comm is NULL");
  RCN_ARG_CHECK(nranks > 0 && rank >= 0 && rank < nranks,
                "bootstrap over NCCL: rank %d of %d is out of range", rank, nranks);
  auto boot = std::make_unique<NcclBootstrapImpl>(comm, rank, nranks, cudaDev);
  RCN_CHECK(boot->init());
  *out = std::move(boot);
  return rcnSuccess;
}

}  // namespace rcn
