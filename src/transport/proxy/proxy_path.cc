// SPDX-License-Identifier: BSD-3-Clause
// The proxy path: a GPU kernel and a host proxy thread per communicator,
// moving bytes over a wire (shm on one host, verbs across RoCE, tcp
// anywhere). The exchange region is either the wire's registered host
// memory, mapped into the GPU with cudaHostRegister, or GPU memory the wire
// writes directly (GPUDirect RDMA; region_placement.h says when); either way
// the kernel stages into it and reads peers' data from it, and the wire
// writes into it. In GPU memory the proxy's CPU cannot watch the kernel's
// lines, so every call uses the staged LL protocol (proxy_kernel.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "core/device_drain.h"
#include "core/device_memory.h"
#include "core/device_scope.h"
#include "core/dtype.h"
#include "core/params.h"
#include "kernels/residual_norm.h"
#include "transport/proxy/proxy_engine.h"
#include "transport/proxy/proxy_kernel.h"
#include "transport/proxy/region_placement.h"
#include "transport/transport.h"
#include "transport/wire/device_region.h"
#include "transport/wire/exchange_layout.h"
#include "transport/wire/wire.h"

namespace rcn {

namespace {

// Host-mapped pinned memory the kernels and the host both see.
struct ProxyHostShared {
  OneShotError error;
  uint32_t abort;  // set by abort() or the proxy on a wire error
};

class ProxyPath final : public FastPath {
 public:
  ~ProxyPath() override { release(); }

  rcnPath_t path() const override { return rcnPathProxy; }
  const char* transportName() const override { return name_; }
  size_t maxBytes() const override { return maxBytes_; }

  rcnResult_t enqueue(const void* send, void* recv, size_t count, rcnDataType_t dtype,
                      rcnRedOp_t op, cudaStream_t stream) override {
    if (count == 0) return rcnSuccess;
    RCN_CHECK(checkGpuCall("proxy all-reduce", count * dtypeSize(dtype), maxBytes_, send, recv, dtype));
    ProxyKernelArgs args = callArgs(send, recv, count, callSignature(count, dtype, op), kProxyAllReduce);
    return launch(args, dtype, op, stream);
  }

  // All-gather and reduce-scatter move their bytes as the all-reduce does:
  // the all-gather stages its share, the reduce-scatter its whole input
  // (every peer gets every block, nranks times the bytes it needs, which
  // keeps the proxy threads and the wire unaware of the collective), so a
  // reduce-scatter's whole input must fit a slot.
  bool runs(Collective) const override { return true; }
  size_t maxShareBytes() const override { return maxBytes_ / static_cast<size_t>(nranks_); }

 protected:
  rcnResult_t enqueueAllGather(const void* send, void* recv, size_t sendCount, rcnDataType_t dtype,
                               cudaStream_t stream) override {
    if (sendCount == 0) return rcnSuccess;
    RCN_CHECK(checkGpuCall("proxy all-gather", sendCount * dtypeSize(dtype), maxShareBytes(), send, recv, dtype));
    const uint32_t signature = callSignature(sendCount, dtype, rcnSum, static_cast<int>(Collective::AllGather));
    return launch(callArgs(send, recv, sendCount, signature, kProxyAllGather), dtype, rcnSum, stream);
  }

  rcnResult_t enqueueReduceScatter(const void* send, void* recv, size_t recvCount, rcnDataType_t dtype, rcnRedOp_t op,
                                   cudaStream_t stream) override {
    if (recvCount == 0) return rcnSuccess;
    RCN_CHECK(checkGpuCall("proxy reduce-scatter", recvCount * dtypeSize(dtype), maxShareBytes(), send, recv, dtype));
    const uint32_t signature = callSignature(recvCount, dtype, op, static_cast<int>(Collective::ReduceScatter));
    ProxyKernelArgs args =
        callArgs(send, recv, recvCount * static_cast<size_t>(nranks_), signature, kProxyReduceScatter);
    args.blockBegin = recvCount * static_cast<size_t>(rank_);
    args.blockEnd = args.blockBegin + recvCount;
    return launch(args, dtype, op, stream);
  }

 public:
  rcnResult_t asyncError(std::string* why) override;
  // The wire first: it wakes a proxy thread blocked in a put (a full socket
  // or send queue), which stop() then joins without waiting for its timeout.
  void abort() override {
    if (host_) host_->abort = 1;
    if (wire_) wire_->abortWith("proxy path: rank " + std::to_string(rank_) + " aborted its communicator");
    if (engine_) engine_->stop();
  }
  void setPeerWaitMs(uint64_t ms) override { args_.timeoutNs = ms * 1000000ull; }

  rcnResult_t build(const FastPathContext& ctx, std::string* why);

 private:
  // args_ with the call's own fields; count: the elements each rank stages.
  ProxyKernelArgs callArgs(const void* send, void* recv, size_t count, uint32_t signature,
                           ProxyCollective collective) const {
    ProxyKernelArgs args = args_;
    args.send = send;
    args.recv = recv;
    args.count = count;
    args.signature = signature;
    args.collective = collective;
    return args;
  }
  // The grid for the staged bytes, then the launch on this path's device.
  rcnResult_t launch(const ProxyKernelArgs& args, rcnDataType_t dtype, rcnRedOp_t op, cudaStream_t stream) {
    const size_t bytes = args.count * dtypeSize(dtype);
    OneShotGrid grid = oneShotGrid(bytes, llMaxBytes_, gridBlocks_, threads_);
    const size_t units = grid.protocol == OneShotProtocol::LL ? (bytes + 7) / 8 : (bytes + 15) / 16;
    grid.blocks = proxyBlocksFor(units, grid.blocks);
    DeviceScope guard(cudaDev_);  // the caller may have another GPU current
    RCN_ARG_CHECK(guard.ok(), "cannot make CUDA device %d current", cudaDev_);
    return launchProxyKernel(args, dtype, op, grid, stagedLines_, programmaticLaunch_, stream);
  }
  rcnResult_t buildWire(const FastPathContext& ctx, std::string* why);
  rcnResult_t gatherVerbsFacts(const FastPathContext& ctx, std::vector<uint8_t>* dmabufByRank,
                               std::vector<std::string>* nicByRank);
  rcnResult_t mapRegion(void** deviceRegion);
  void release();

  int rank_ = 0;
  int nranks_ = 1;
  int cudaDev_ = -1;
  size_t maxBytes_ = 0;
  size_t llMaxBytes_ = 0;
  int maxBlocks_ = 0;
  int gridBlocks_ = 0;  // most blocks per call: no more than the proxy has lanes
  int threads_ = 0;
  uint64_t timeoutMs_ = 0;  // creation's, teardown's and the engine's waits
  bool programmaticLaunch_ = false;
  bool stagedLines_ = false;  // region in GPU memory: staged LL for every call
  char name_[32] = "proxy";
  ExchangeLayout layout_;
  DeviceRegionMemory deviceRegion_;  // when the region is in GPU memory
  std::unique_ptr<Wire> wire_;
  std::unique_ptr<ProxyEngine> engine_;
  bool registered_ = false;
  ProxyState* state_ = nullptr;       // device memory
  ProxyHostShared* host_ = nullptr;     // cudaHostAlloc, mapped
  ProxyDoorbell* doorbells_ = nullptr;  // cudaHostAlloc, mapped
  ProxyKernelArgs args_{};
};

rcnResult_t ProxyPath::build(const FastPathContext& ctx, std::string* why) {
  rank_ = ctx.rank;
  nranks_ = ctx.nranks;
  cudaDev_ = ctx.cudaDev;
  maxBytes_ = ctx.maxBytes;
  maxBlocks_ = ctx.maxBlocks;
  threads_ = ctx.threads;
  timeoutMs_ = ctx.timeoutMs;
  // Not ROCENANTE_PDL: on the H200 host an early-scheduled next kernel made
  // the proxy path slower (48 KB: 16.9 us against 15.4 us without).
  programmaticLaunch_ = false;
  // Checked before the collective steps, so a bad value costs no setup.
  const int64_t scrubCalls = paramInt(ParamId::ProxyScrubCalls);
  RCN_ARG_CHECK((scrubCalls & (scrubCalls - 1)) == 0, "ROCENANTE_PROXY_SCRUB_CALLS=%lld must be a power of two",
                static_cast<long long>(scrubCalls));
  args_.scrubCalls = uint32_t(scrubCalls);
  RCN_CHECK(buildWire(ctx, why));
  if (!wire_) return rcnSuccess;  // no wire fits; why says so
  std::snprintf(name_, sizeof name_, "proxy-%s%s", wire_->name(), stagedLines_ ? "-gpumem" : "");
  void* deviceRegion = nullptr;
  RCN_CHECK(mapRegion(&deviceRegion));

  RCN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&state_), sizeof(ProxyState)));
  // The first call is numbered firstCall (1 but where a test crosses the
  // wrap). Finished before any call: they run on the caller's stream, which
  // does not wait for this one.
  const uint32_t firstCall = uint32_t(paramInt(ParamId::ProxyFirstCall));
  ProxyState start{};
  start.epoch = firstCall - 1;
  RCN_CHECK(copyToDeviceMemory(state_, &start, sizeof start));
  RCN_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(ProxyHostShared),
                               cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(host_, 0, sizeof *host_);
  size_t bellBytes = sizeof(ProxyDoorbell) * ExchangeLayout::kPhases * maxBlocks_;
  RCN_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&doorbells_), bellBytes,
                               cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(doorbells_, 0, bellBytes);

  args_.rank = ctx.rank;
  args_.nranks = ctx.nranks;
  args_.maxBlocks = maxBlocks_;
  args_.region = static_cast<char*>(deviceRegion);
  args_.layout = layout_.region;
  void* p = nullptr;
  RCN_CUDA_CHECK(cudaHostGetDevicePointer(&p, doorbells_, 0));
  args_.doorbells = static_cast<ProxyDoorbell*>(p);
  args_.state = state_;
  RCN_CUDA_CHECK(cudaHostGetDevicePointer(&p, &host_->error, 0));
  args_.error = static_cast<OneShotError*>(p);
  RCN_CUDA_CHECK(cudaHostGetDevicePointer(&p, &host_->abort, 0));
  args_.abortFlag = static_cast<const volatile uint32_t*>(p);
  args_.timeoutNs = timeoutMs_ * 1000000ull;
  RCN_CHECK(preloadProxyKernels());  // ranks may share this GPU
  RCN_CHECK(preloadResidualNormKernels());  // rcnAllReduceResidualRmsNorm's norm after this path's all-reduce

  engine_ = std::make_unique<ProxyEngine>(wire_.get(), layout_, rank_, doorbells_, &host_->abort,
                                          paramInt(ParamId::ProxySpinUs),
                                          int(paramInt(ParamId::ProxyThreads)), timeoutMs_, firstCall);
  engine_->start();
  // On wires where lanes copy in parallel, a call's blocks are served one
  // per lane at once: more blocks than lanes only queue up behind each other
  // (48 KB on the H200 host: 14.4 us with 12 blocks on 4 lanes, 12.3-12.4 us
  // with 6 on 6 or 8 on 8). The lane count is an agreed parameter, so every
  // rank computes the same grids.
  gridBlocks_ = wire_->concurrentPuts() ? engine_->lanes() : maxBlocks_;  // lanes <= maxBlocks_
  return rcnSuccess;
}

// What every rank's verbs wire will do, which only that rank's host knows:
// whether its rdma-core registers a dma-buf, and which NIC it opens.
rcnResult_t ProxyPath::gatherVerbsFacts(const FastPathContext& ctx, std::vector<uint8_t>* dmabufByRank,
                                        std::vector<std::string>* nicByRank) {
  struct Facts {
    uint8_t dmabuf;
    char nic[63];
  };
  std::vector<Facts> facts(ctx.nranks, Facts{});
  facts[rank_].dmabuf = verbsDmabufRegistration() ? 1 : 0;
  VerbsPortSummary port;
  std::string why;  // no usable port: the wire's own setup says why
  if (verbsPortSummary(&port, &why, verbsPreferredNic(ctx)))
    std::snprintf(facts[rank_].nic, sizeof facts[rank_].nic, "%s", port.device.c_str());
  RCN_CHECK(ctx.bootstrap->allGather(facts.data(), sizeof(Facts)));
  for (int r = 0; r < ctx.nranks; ++r) {
    (*dmabufByRank)[r] = facts[r].dmabuf;
    nicByRank->push_back(facts[r].nic);
  }
  return rcnSuccess;
}

// Resolves the wire kind, places the region, sizes it (the protocols
// depend on both) and builds the wire. LL doubles the bytes on the wire; on
// host memory it pays where the CPU copies (shm) and measured 3x slower over
// tcp (8 KB: 91 us against 32 us with flags), so tcp and verbs use flags;
// in GPU memory every call is staged LL, which needs no write ordering from
// the NIC into GPU memory.
rcnResult_t ProxyPath::buildWire(const FastPathContext& ctx, std::string* why) {
  WireKind requested, kind;
  GdrMode gdr;
  RCN_CHECK(wireKindFromParams(&requested));
  RCN_CHECK(gdrModeFromParams(&gdr));
  RCN_CHECK(resolveWireKind(ctx, requested, &kind));
  // Whether a host's rdma-core registers a dma-buf is its own fact (the
  // library is loaded at run time): every rank judges every rank by the
  // rank's own answer, so all place their regions alike.
  std::vector<uint8_t> dmabufByRank(ctx.nranks, 0);
  std::vector<std::string> nicByRank;
  if (kind == WireKind::Verbs) RCN_CHECK(gatherVerbsFacts(ctx, &dmabufByRank, &nicByRank));
  RegionPlacement placement;
  rcnResult_t placed = chooseRegionPlacement(ctx.topo, rank_, kind, gdr, dmabufByRank, &placement, nicByRank);
  if (placed != rcnSuccess) {
    *why = "proxy path: " + placement.why;
    return placed;
  }
  RCN_INFO(RCN_LOG_INIT, "proxy path: rank %d exchange region: %s", rank_, placement.why.c_str());
  stagedLines_ = placement.device;
  const size_t shmLlBytes = size_t(paramInt(ParamId::ProxyLlMaxBytes));
  llMaxBytes_ = stagedLines_ ? ctx.maxBytes : kind == WireKind::Shm ? std::min(ctx.maxBytes, shmLlBytes) : 0;
  layout_ = ExchangeLayout::make(ctx.nranks, ctx.maxBytes, ctx.maxBlocks, llMaxBytes_);
  if (!stagedLines_) return createWire(ctx, kind, layout_.wireLayout(), &wire_, why);

  // Every rank learns whether every rank got its GPU memory before the wire
  // setup's own collective steps.
  std::string localWhy;
  const bool ok =
      deviceRegion_.allocate(cudaDev_, layout_.region.totalBytes, placement.dmabuf, &localWhy) == rcnSuccess;
  rcnResult_t agreed = agreeOnStep(ctx.bootstrap, rank_, ctx.nranks, ok, "proxy path: " + localWhy, "proxy",
                                   "allocate its GPU-memory region", why);
  if (agreed != rcnSuccess) return agreed;
  return createWire(ctx, kind, layout_.wireLayout(), &wire_, why, &deviceRegion_.region());
}

// The kernel's view of the region: GPU memory as it is, or the wire's host
// memory mapped into the GPU (zero-copy).
rcnResult_t ProxyPath::mapRegion(void** deviceRegion) {
  RCN_CUDA_CHECK(cudaSetDevice(cudaDev_));
  if (stagedLines_) {
    *deviceRegion = wire_->region();
    return rcnSuccess;
  }
  RCN_CUDA_CHECK(cudaHostRegister(wire_->region(), layout_.region.totalBytes,
                                  cudaHostRegisterMapped | cudaHostRegisterPortable));
  registered_ = true;
  RCN_CUDA_CHECK(cudaHostGetDevicePointer(deviceRegion, wire_->region(), 0));
  return rcnSuccess;
}

rcnResult_t ProxyPath::asyncError(std::string* why) {
  if (host_) {
    uint32_t code = __atomic_load_n(&host_->error.code, __ATOMIC_ACQUIRE);
    if (code == kOneShotMismatch) {
      // Every flag carries the call's signature, so both ranks of the pair see it.
      if (why) *why = "proxy path: " + callMismatchText(rank_, host_->error.peer, host_->error.call);
      return rcnInvalidUsage;
    }
    if (code != kOneShotOk) {
      if (why) {
        char text[200];
        std::snprintf(text, sizeof text, "proxy path: rank %d, block %u of call %u %s rank %u", rank_,
                      host_->error.block, host_->error.call,
                      code == kOneShotTimeout ? "timed out waiting for" : "gave up waiting for",
                      host_->error.peer);
        *why = text;
        std::string proxyWhy;
        if (engine_ && engine_->error(&proxyWhy) != rcnSuccess) *why += " (" + proxyWhy + ")";
      }
      return rcnRemoteError;
    }
  }
  if (engine_) return engine_->error(why);
  return rcnSuccess;
}

// Frees in reverse order. Before the engine stops, it forwards every call the
// GPU already finished, so a peer still waiting for our last flags gets them.
// The wait for the GPU is bounded (work that is not ours may never end, say
// another communicator's kernel on a dead peer); past it, what the GPU may
// still touch is leaked rather than freed under it (a free would wait too).
void ProxyPath::release() {
  DeviceScope device(cudaDev_);  // and the caller's current device back at the end
  cudaError_t deviceError = cudaSuccess;
  const bool drained = !device.ok() || drainDevice(cudaDev_, int64_t(timeoutMs_), &deviceError) == Drained::Yes;
  if (drained && engine_ && state_ && host_ && !host_->abort && engine_->error(nullptr) == rcnSuccess) {
    ProxyState st{};
    if (device.ok() && deviceError == cudaSuccess &&
        cudaMemcpy(&st, state_, sizeof st, cudaMemcpyDeviceToHost) == cudaSuccess && !st.failed &&
        engine_->drain(st.epoch, timeoutMs_) != rcnSuccess)
      RCN_INFO(RCN_LOG_PROXY, "proxy path: rank %d: calls the GPU finished were not all forwarded before "
               "release (the engine failed or %llu ms passed)", rank_, (unsigned long long)timeoutMs_);
  }
  std::string why;
  bool healthy = drained && engine_ && engine_->error(&why) == rcnSuccess && host_ &&
                 host_->error.code == kOneShotOk && !host_->abort;
  // A kernel still running may be waiting for a late peer: it must give up
  // (its host memory is leaked below, so the flag stays readable), and a
  // lane blocked on the wire must wake before the engine joins it.
  if (!drained && host_) host_->abort = 1;
  if (wire_ && !healthy) wire_->abort();
  engine_.reset();
  if (wire_ && healthy) wire_->close();
  if (!drained) {
    RCN_WARN(RCN_LOG_PROXY, "proxy path: rank %d: device %d still runs kernels after %llu ms; its memory is "
             "leaked", rank_, cudaDev_, (unsigned long long)timeoutMs_);
    (void)wire_.release();
    deviceRegion_.abandon();
    return;
  }
  if (registered_) cudaHostUnregister(wire_->region());
  if (state_) cudaFree(state_);
  if (host_) cudaFreeHost(host_);
  if (doorbells_) cudaFreeHost(doorbells_);
  wire_.reset();  // deregisters the region before it is freed
  deviceRegion_.release();
}

}  // namespace

rcnResult_t createProxyPath(const FastPathContext& ctx, std::unique_ptr<FastPath>* out,
                            std::string* why) {
  out->reset();
  if (ctx.cudaDev < 0) {
    *why = "proxy path: no GPU";
    return rcnSuccess;
  }
  RCN_ARG_CHECK(ctx.nranks >= 1 && ctx.nranks <= kOneShotMaxRanks,
                "proxy path: %d ranks (at most %d)", ctx.nranks, kOneShotMaxRanks);
  RCN_ARG_CHECK(ctx.maxBlocks >= 1 && ctx.threads >= 32 && ctx.maxBytes % 16 == 0,
                "proxy path: bad limits (blocks %d, threads %d, maxBytes %zu)", ctx.maxBlocks,
                ctx.threads, ctx.maxBytes);
  auto path = std::make_unique<ProxyPath>();
  RCN_CHECK(path->build(ctx, why));
  if (path->transportName() == std::string("proxy")) return rcnSuccess;  // no wire fits
  RCN_INFO(RCN_LOG_INIT, "proxy path: rank %d of %d over %s", ctx.rank, ctx.nranks,
           path->transportName());
  *out = std::move(path);
  return rcnSuccess;
}

}  // namespace rcn
