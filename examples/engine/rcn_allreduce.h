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
  explicit RcnAllReduce(rcnComm_t comm) : comm_(comm) {}
  void sum(void* data, size_t count, DType type, cudaStream_t stream) override {
    rcnCheck(rcnAllReduce(data, data, count, type == DType::F32 ? rcnFloat32 : rcnBfloat16, rcnSum, comm_,
                          reinterpret_cast<rcnStream_t>(stream)),
             "rcnAllReduce");
  }
  void maxKeys(uint64_t* keys, size_t count, cudaStream_t stream) override {
    rcnCheck(rcnAllReduce(keys, keys, count, rcnUint64, rcnMax, comm_, reinterpret_cast<rcnStream_t>(stream)),
             "rcnAllReduce");
  }

 private:
  rcnComm_t comm_;
};

}  // namespace engine
