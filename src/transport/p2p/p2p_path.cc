// SPDX-License-Identifier: BSD-3-Clause
#include "transport/p2p/p2p_path.h"

#include <cstdint>

#include "core/check.h"
#include "core/device_scope.h"
#include "core/dtype.h"
#include "kernels/one_shot_collectives.h"
#include "transport/transport.h"

namespace rcn {

P2pPath::~P2pPath() {
  DeviceScope guard(cudaDev_);
  // Freeing device memory waits for kernels still using it; after abort() or a
  // timeout they have returned, so this is bounded by the kernel timeout.
  peers_.clear();
  own_.release();
  if (state_ && cudaFree(state_) != cudaSuccess) RCN_WARN(RCN_LOG_TRANSPORT, "cudaFree of p2p state failed");
  if (host_ && cudaFreeHost(host_) != cudaSuccess) RCN_WARN(RCN_LOG_TRANSPORT, "cudaFreeHost of p2p state failed");
  cudaGetLastError();
}

OneShotArgs P2pPath::callArgs(const void* send, void* recv, size_t count, uint32_t signature) const {
  OneShotArgs args = args_;
  args.send = send;
  args.recv = recv;
  args.count = count;
  args.signature = signature;
  return args;
}

rcnResult_t P2pPath::enqueue(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                             cudaStream_t stream) {
  if (count == 0) return rcnSuccess;
  const size_t bytes = count * dtypeSize(dtype);
  RCN_CHECK(checkGpuCall("p2p all-reduce", bytes, maxBytes_, send, recv, dtype));
  const OneShotArgs args = callArgs(send, recv, count, callSignature(count, dtype, op));
  const OneShotGrid grid = oneShotGrid(bytes, llMaxBytes_, maxBlocks_, threads_);
  DeviceScope guard(cudaDev_);
  RCN_ARG_CHECK(guard.ok(), "cannot make CUDA device %d current", cudaDev_);
  return launchOneShot(args, dtype, op, grid, launch_, stream);
}

// The share (bytes) fits the LL lines, so oneShotGrid picks LL, as the kernels need.
rcnResult_t P2pPath::enqueueAllGather(const void* send, void* recv, size_t sendCount, rcnDataType_t dtype,
                                      cudaStream_t stream) {
  if (sendCount == 0) return rcnSuccess;
  const size_t share = sendCount * dtypeSize(dtype);
  RCN_CHECK(checkGpuCall("p2p all-gather", share, llMaxBytes_, send, recv, dtype));
  const uint32_t signature = callSignature(sendCount, dtype, rcnSum, static_cast<int>(Collective::AllGather));
  const OneShotArgs args = callArgs(send, recv, share, signature);
  DeviceScope guard(cudaDev_);
  RCN_ARG_CHECK(guard.ok(), "cannot make CUDA device %d current", cudaDev_);
  return launchAllGather(args, oneShotGrid(share, llMaxBytes_, maxBlocks_, threads_), launch_, stream);
}

rcnResult_t P2pPath::enqueueReduceScatter(const void* send, void* recv, size_t recvCount, rcnDataType_t dtype,
                                          rcnRedOp_t op, cudaStream_t stream) {
  if (recvCount == 0) return rcnSuccess;
  const size_t share = recvCount * dtypeSize(dtype);
  RCN_CHECK(checkGpuCall("p2p reduce-scatter", share, llMaxBytes_, send, recv, dtype));
  const uint32_t signature = callSignature(recvCount, dtype, op, static_cast<int>(Collective::ReduceScatter));
  const OneShotArgs args = callArgs(send, recv, recvCount, signature);
  DeviceScope guard(cudaDev_);
  RCN_ARG_CHECK(guard.ok(), "cannot make CUDA device %d current", cudaDev_);
  return launchReduceScatter(args, dtype, op, oneShotGrid(share, llMaxBytes_, maxBlocks_, threads_), launch_, stream);
}

rcnResult_t P2pPath::asyncError(std::string* why) {
  volatile OneShotError* e = &host_->error;
  const uint32_t code = e->code;
  if (code == kOneShotOk) return rcnSuccess;
  const uint32_t peer = e->peer, call = e->call, block = e->block;
  if (code == kOneShotTimeout) {
    *why = "rank " + std::to_string(rank_) + ": peer " + std::to_string(peer) + " did not arrive within " +
           std::to_string(timeoutMs_) + " ms (call " + std::to_string(call) + ", block " +
           std::to_string(block) + ")";
  } else if (code == kOneShotMismatch) {
    // Each rank of the pair sees the other's tag, or, in different protocols,
    // the other protocol's mark (one_shot.cu), so both report it.
    *why = callMismatchText(rank_, peer, call);
    return rcnInvalidUsage;
  } else if (code == kOneShotBadUse) {
    *why = "rank " + std::to_string(rank_) + ": a device-API call broke its rules (block " + std::to_string(block) +
           " past maxBlocks, or an index past maxValues or odd; docs/DEVICE_API.md)";
    return rcnInvalidUsage;  // this rank's own misuse, not a missing peer
  } else {
    *why = "rank " + std::to_string(rank_) + ": aborted while waiting for peer " + std::to_string(peer) +
           " (call " + std::to_string(call) + ")";
  }
  return rcnRemoteError;
}

void P2pPath::setPeerWaitMs(uint64_t ms) {
  timeoutMs_ = ms;
  args_.timeoutNs = device_.timeoutNs = ms * 1000000ull;
}

bool P2pPath::deviceComm(rcnDeviceComm* out, std::string* why) const {
  if (device_.maxValues == 0) {
    *why = "the p2p path has no device window (ROCENANTE_DEVICE_WINDOW_BYTES=0)";
    return false;
  }
  *out = device_;
  return true;
}

void P2pPath::abort() {
  if (host_) *reinterpret_cast<volatile uint32_t*>(&host_->abort) = 1;
}

}  // namespace rcn
