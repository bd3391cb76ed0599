// SPDX-License-Identifier: BSD-3-Clause
// The GPU all-reduce of the engine through the rcn API: rocenante's one-shot
// path for small messages, NCCL for the rest (or for all of them when
// ROCENANTE_DISABLE=1 was set before the communicator was made).
#pragma once

#include <string>

#include "gpu_model.h"
#include "rcn_result.h"

namespace engine {

class RcnAllReduce : public GpuAllReduce {
 public:
  // The device API where the communicator's fast path offers it (p2p).
  explicit RcnAllReduce(rcnComm_t comm) : comm_(comm) {
    hasExchange_ = rcnCommGetDeviceComm(comm, &exchange_) == rcnSuccess;
  }
  void sum(void* data, size_t count, DType type, cudaStream_t stream) override {
    rcnCheck(rcnAllReduce(data, data, count, type == DType::F32 ? rcnFloat32 : rcnBfloat16, rcnSum, comm_,
                          reinterpret_cast<rcnStream_t>(stream)),
             "rcnAllReduce");
  }
  void sumResidualNorm(const void* delta, void* residual, const void* weight, void* out, int n, int dim, float eps,
                       cudaStream_t stream) override {
    rcnCheck(rcnAllReduceResidualRmsNorm(delta, residual, weight, out, size_t(n), size_t(dim), rcnBfloat16, rcnBfloat16,
                                         nullptr, eps, comm_, reinterpret_cast<rcnStream_t>(stream)),
             "rcnAllReduceResidualRmsNorm");
  }
  void maxKeys(uint64_t* keys, size_t count, cudaStream_t stream) override {
    rcnCheck(rcnAllReduce(keys, keys, count, rcnUint64, rcnMax, comm_, reinterpret_cast<rcnStream_t>(stream)),
             "rcnAllReduce");
  }

  const rcnDeviceComm* exchange() const override { return hasExchange_ ? &exchange_ : nullptr; }
  void checkPeers() override {
    rcnResult_t async = rcnSuccess;
    rcnCheck(rcnCommGetAsyncError(comm_, &async), "rcnCommGetAsyncError");
    if (async != rcnSuccess)
      throw EngineError(std::string("a peer did not take part in an all-reduce: ") + rcnGetLastError(comm_));
  }

 private:
  rcnComm_t comm_;
  rcnDeviceComm exchange_{};
  bool hasExchange_ = false;
};

}  // namespace engine
