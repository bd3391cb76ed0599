// SPDX-License-Identifier: BSD-3-Clause
// The p2p fast path: ranks on one host whose GPUs reach each other's memory
// (NVLink or PCIe peer access). Each rank's kernel stores straight into its
// peers' exchange regions (src/kernels/one_shot.h). Built by createP2pPath
// (p2p_create.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/fast_path.h"
#include "kernels/one_shot.h"
#include "transport/p2p/ipc_memory.h"

namespace rcn {

// Block slots of the device API's call numbers: the most blocks a kernel
// taking part may launch (a resident grid of 8 blocks on each of up to 512 SMs).
constexpr int kDeviceCallSlots = 4096;

// Host-mapped pinned memory the kernel and the host both see.
struct P2pHostShared {
  OneShotError error;
  uint32_t abort;  // set by abort(); kernels give up their waits
};

class P2pPath final : public FastPath {
 public:
  ~P2pPath() override;

  rcnPath_t path() const override { return rcnPathP2p; }
  const char* transportName() const override { return ipcKindName(kind_); }
  size_t maxBytes() const override { return maxBytes_; }
  // All-gather and reduce-scatter run in the LL lines only.
  bool runs(Collective coll) const override { return coll == Collective::AllReduce || llMaxBytes_ > 0; }
  size_t maxShareBytes() const override { return llMaxBytes_; }
  rcnResult_t asyncError(std::string* why) override;
  void abort() override;
  void setPeerWaitMs(uint64_t ms) override;
  bool deviceComm(rcnDeviceComm* out, std::string* why) const override;
  bool fusesResidualNorm(const ResidualNormCall& call) const override;  // p2p_residual_norm.cc

 protected:
  rcnResult_t enqueue(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                      cudaStream_t stream) override;
  rcnResult_t enqueueAllGather(const void* send, void* recv, size_t sendCount, rcnDataType_t dtype,
                               cudaStream_t stream) override;
  rcnResult_t enqueueReduceScatter(const void* send, void* recv, size_t recvCount, rcnDataType_t dtype, rcnRedOp_t op,
                                   cudaStream_t stream) override;
  rcnResult_t enqueueResidualNorm(const ResidualNormCall& call, cudaStream_t stream) override;

 private:
  // args_ with the call's own fields.
  OneShotArgs callArgs(const void* send, void* recv, size_t count, uint32_t signature) const;

  friend rcnResult_t createP2pPath(const FastPathContext&, std::unique_ptr<FastPath>*, std::string*);

  int rank_ = 0;
  int cudaDev_ = -1;
  IpcKind kind_ = IpcKind::Local;
  size_t maxBytes_ = 0;
  size_t llMaxBytes_ = 0;
  int maxBlocks_ = 0;
  int threads_ = 0;
  uint64_t timeoutMs_ = 0;  // the kernels' bound on a wait for a peer
  OneShotLaunchOptions launch_;

  OneShotArgs args_{};  // every field but the call's own (send, recv, count, signature)
  DeviceMapping own_;
  std::vector<DeviceMapping> peers_;  // peers_[rank_] stays empty
  uint32_t* state_ = nullptr;         // device memory: oneShotStateWords, then kDeviceCallSlots
  rcnDeviceComm device_{};            // maxValues 0: no window
  P2pHostShared* host_ = nullptr;     // cudaHostAlloc, mapped
};

}  // namespace rcn
