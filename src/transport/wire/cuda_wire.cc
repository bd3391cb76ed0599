// SPDX-License-Identifier: BSD-3-Clause
// The cuda wire: the stand-in for GPUDirect RDMA on one host, so the proxy
// path's device-memory protocol runs for real where there is no NIC. Each
// rank's region is device memory (a DeviceRegion) that every peer maps with
// CUDA IPC; a put is a copy-engine copy (cudaMemcpyAsync) from this rank's
// region into the peer's, and a flag a 32-bit stream write after it on the
// same stream, so, as on an RC queue pair, the flag lands after the payload
// and neither touches the CPU. Ranks on other hosts cannot take part.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "transport/p2p/cumem_api.h"
#include "transport/p2p/ipc_memory.h"
#include "transport/wire/peer_identity.h"
#include "transport/wire/wire.h"

namespace rcn {

namespace {

struct CudaBlob {
  cudaIpcMemHandle_t handle;
  PeerIdentity identity;
};

std::string cudaWhy(const char* what, cudaError_t err) {
  return std::string("cuda wire: ") + what + " failed: " + cudaGetErrorString(err);
}

class CudaWire final : public Wire {
 public:
  // Lets the copies in flight finish before peers_ unmaps the peers' regions.
  ~CudaWire() override {
    if (stream_) {
      cudaSetDevice(device_.cudaDev);
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }

  const char* name() const override { return "cuda"; }
  uint8_t* region() const override { return device_.ptr; }

  rcnResult_t setup(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion& device,
                    std::string* why);

  rcnResult_t put(int peer, size_t localOffset, size_t remoteOffset, size_t bytes) override {
    RCN_CHECK(checkPut(peer, localOffset, remoteOffset, bytes));
    if (bytes == 0) return rcnSuccess;
    RCN_CHECK(useDevice());
    cudaError_t err = cudaMemcpyAsync(peers_[peer].ptr() + remoteOffset, device_.ptr + localOffset, bytes,
                                      cudaMemcpyDeviceToDevice, stream_);
    if (err != cudaSuccess) return fail(cudaWhy("cudaMemcpyAsync to a peer's region", err));
    return rcnSuccess;
  }

  rcnResult_t putFlag(int peer, size_t flagIndex, uint32_t value) override {
    RCN_CHECK(checkPutFlag(peer, flagIndex));
    RCN_CHECK(useDevice());
    const CUdeviceptr flag =
        reinterpret_cast<CUdeviceptr>(peers_[peer].ptr() + layout_.flagOffset + flagIndex * sizeof(uint32_t));
    // The default flags order the write after every earlier write of the stream.
    CUresult res = api_->streamWriteValue32(stream_, flag, value, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (res != CUDA_SUCCESS) return fail("cuda wire: cuStreamWriteValue32 failed: " + cuResultText(res));
    return rcnSuccess;
  }

  // A failed copy shows up on the stream; a killed peer as an exited pid.
  rcnResult_t progress() override {
    if (failure_.failed()) return rcnRemoteError;
    if (useDevice() != rcnSuccess) return rcnRemoteError;
    cudaError_t err = cudaStreamQuery(stream_);
    if (err != cudaSuccess && err != cudaErrorNotReady) return fail(cudaWhy("a copy to a peer", err));
    const std::string gone = exitWatch_.check();
    return gone.empty() ? rcnSuccess : fail(gone);
  }

  rcnResult_t error(std::string* why) const override { return failure_.get(why); }
  void abort() override { aborted_.store(true, std::memory_order_release); }

 private:
  bool stopped() const override { return aborted_.load(std::memory_order_acquire) || failure_.failed(); }
  // Proxy threads start with no current device.
  rcnResult_t useDevice() {
    cudaError_t err = cudaSetDevice(device_.cudaDev);
    return err == cudaSuccess ? rcnSuccess : fail(cudaWhy("cudaSetDevice", err));
  }
  rcnResult_t fail(const std::string& text) {
    failure_.record(text);
    return rcnRemoteError;
  }
  rcnResult_t openPeers(const std::vector<CudaBlob>& blobs, std::string* why);

  DeviceRegion device_;
  const CuMemApi* api_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<DeviceMapping> peers_;  // [rank], each peer's region mapped here; [rank_] stays empty
  PeerExitWatch exitWatch_;
  std::atomic<bool> aborted_{false};
  WireFailure failure_;
};

rcnResult_t CudaWire::openPeers(const std::vector<CudaBlob>& blobs, std::string* why) {
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    if (peers_[r].importLegacy(blobs[r].handle) != rcnSuccess) {  // the CUDA error is in the log
      *why = "cuda wire: cudaIpcOpenMemHandle of rank " + std::to_string(r) + "'s region failed";
      return rcnSystemError;
    }
  }
  return rcnSuccess;
}

rcnResult_t CudaWire::setup(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion& device,
                            std::string* why) {
  rank_ = ctx.rank;
  nranks_ = ctx.nranks;
  layout_ = layout;
  device_ = device;
  peers_.resize(nranks_);

  std::string localWhy;
  std::vector<CudaBlob> blobs(nranks_);
  blobs[rank_].identity = localPeerIdentity();
  bool ok = (api_ = cuMemApi(&localWhy)) != nullptr;
  cudaError_t err = cudaSuccess;
  if (ok && (err = cudaSetDevice(device_.cudaDev)) == cudaSuccess &&
      (err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)) == cudaSuccess)
    err = cudaIpcGetMemHandle(&blobs[rank_].handle, device_.ptr);
  if (ok && err != cudaSuccess) {
    localWhy = cudaWhy("exporting the region (cudaIpcGetMemHandle)", err);
    ok = false;
  }
  RCN_CHECK(ctx.bootstrap->allGather(blobs.data(), sizeof(CudaBlob)));
  // Another host is the same verdict on every rank.
  if (exitWatch_.watch(identitiesOf(blobs), rank_, name(), why) != rcnSuccess) return rcnInvalidUsage;
  rcnResult_t res = agreeOnStep(ctx.bootstrap, rank_, nranks_, ok, localWhy, name(), "export its region", why);
  if (res != rcnSuccess) return res;
  ok = openPeers(blobs, &localWhy) == rcnSuccess;
  return agreeOnStep(ctx.bootstrap, rank_, nranks_, ok, localWhy, name(), "map a peer's region", why);
}

}  // namespace

rcnResult_t createCudaWire(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion& device,
                           std::unique_ptr<Wire>* out, std::string* why) {
  auto wire = std::make_unique<CudaWire>();
  rcnResult_t res = wire->setup(ctx, layout, device, why);
  if (res == rcnInvalidUsage) return rcnSuccess;  // does not fit: *out stays null
  if (res != rcnSuccess) {
    RCN_WARN(RCN_LOG_TRANSPORT, "%s", why->c_str());
    return res;
  }
  RCN_INFO(RCN_LOG_TRANSPORT, "cuda wire: rank %d mapped %d device regions of %zu bytes", ctx.rank, ctx.nranks,
           layout.regionBytes);
  *out = std::move(wire);
  return rcnSuccess;
}

}  // namespace rcn
