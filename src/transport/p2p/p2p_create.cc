// SPDX-License-Identifier: BSD-3-Clause
// Building the p2p fast path. Collective: every rank runs the same three
// all-gathers whatever happens locally, so one rank's failure becomes a
// "no p2p path" verdict on every rank instead of a hang.
//  1. who and where: host, process, GPU bus id, cuMem support;
//  2. each rank's verdict (peer access to every GPU) and its region handle;
//  3. whether every rank mapped every peer's region.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/device_memory.h"
#include "core/params.h"
#include "kernels/one_shot_collectives.h"
#include "kernels/residual_norm.h"
#include "transport/p2p/cumem_api.h"
#include "transport/p2p/fd_passing.h"
#include "transport/p2p/p2p_path.h"
#include "transport/transport.h"
#include "transport/wire/peer_identity.h"

namespace rcn {

namespace {

struct Verdict {
  int32_t ok = 1;
  char failure[188] = {};

  void fail(const std::string& text) {
    if (!ok) return;  // keep the first reason
    ok = 0;
    std::snprintf(failure, sizeof failure, "%s", text.c_str());
  }
};

struct RankInfo {
  Verdict verdict;  // whether this rank could use its GPU at all
  PeerIdentity id;
  char busId[32] = {};
  int32_t cuMemOk = 0;
  int32_t pad = 0;
};

struct RankRegion {
  Verdict verdict;
  uint64_t ptr = 0;    // raw pointer, for ranks of the same process
  uint64_t bytes = 0;  // mapped size
  cudaIpcMemHandle_t legacy = {};
  FdEndpoint endpoint;
};

bool sameProcess(const RankInfo& a, const RankInfo& b) {
  return a.id.hostHash == b.id.hostHash && a.id.pidNamespace == b.id.pidNamespace && a.id.pid == b.id.pid;
}

// The first failing rank's reason, identical on every rank; empty if none.
template <typename T>
std::string firstFailure(const std::vector<T>& all, const Verdict& (*get)(const T&)) {
  for (size_t r = 0; r < all.size(); ++r)
    if (!get(all[r]).ok) return get(all[r]).failure;
  return "";
}

const Verdict& infoVerdict(const RankInfo& r) { return r.verdict; }
const Verdict& regionVerdict(const RankRegion& r) { return r.verdict; }
const Verdict& plainVerdict(const Verdict& v) { return v; }

IpcKind chooseKind(const std::vector<RankInfo>& infos) {
  bool oneProcess = true, allCuMem = true;
  for (const RankInfo& info : infos) {
    oneProcess = oneProcess && sameProcess(info, infos[0]);
    allCuMem = allCuMem && info.cuMemOk;
  }
  if (oneProcess) return IpcKind::Local;
  const std::string forced = paramStr(ParamId::P2pIpc);
  if (forced == "legacy") return IpcKind::Legacy;
  return allCuMem ? IpcKind::CuMem : IpcKind::Legacy;
}

// Whether this rank's GPU can reach every peer's GPU.
void checkPeerAccess(const FastPathContext& ctx, const std::vector<RankInfo>& infos, Verdict* v) {
  for (int p = 0; p < ctx.nranks; ++p) {
    if (p == ctx.rank) continue;
    if (infos[p].id.hostHash != infos[ctx.rank].id.hostHash) {
      v->fail("ranks " + std::to_string(ctx.rank) + " and " + std::to_string(p) + " are on different hosts");
      return;
    }
    int peerDev = -1;
    if (cudaDeviceGetByPCIBusId(&peerDev, infos[p].busId) != cudaSuccess) {
      cudaGetLastError();
      v->fail("GPU " + std::string(infos[p].busId) + " of rank " + std::to_string(p) +
              " is not visible to rank " + std::to_string(ctx.rank));
      return;
    }
    if (peerDev == ctx.cudaDev) continue;  // two ranks on one GPU share its memory
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, ctx.cudaDev, peerDev) != cudaSuccess || !can) {
      cudaGetLastError();
      v->fail("GPU " + std::to_string(ctx.cudaDev) + " and " + std::to_string(peerDev) +
              " have no peer access");
      return;
    }
  }
}

// The device API's view of the regions: every rank's window, the path's
// `failed` flag, error record and abort flag (so a failed device wait
// stops rcnAllReduce's calls too, and the host reads one error), and its
// own call slots.
void describeDeviceComm(const OneShotArgs& args, const RegionLayout& layout, uint32_t* calls, rcnDeviceComm* dev) {
  dev->rank = args.rank;
  dev->nranks = args.nranks;
  for (int r = 0; r < args.nranks; ++r)
    dev->window[r] = reinterpret_cast<uint64_t*>(args.region[r] + layout.windowOffset);
  dev->maxValues = layout.windowValues;
  dev->calls = calls;
  dev->maxBlocks = kDeviceCallSlots;
  dev->failed = args.state;
  dev->error = args.error;
  dev->abortFlag = args.abortFlag;
  dev->timeoutNs = args.timeoutNs;
}

}  // namespace

rcnResult_t createP2pPath(const FastPathContext& ctx, std::unique_ptr<FastPath>* out, std::string* why) {
  out->reset();
  if (ctx.nranks > kOneShotMaxRanks) {  // ctx is identical on every rank: all return here
    *why = "p2p supports at most " + std::to_string(kOneShotMaxRanks) + " ranks, not " +
           std::to_string(ctx.nranks);
    return rcnSuccess;
  }
  RCN_ARG_CHECK(ctx.bootstrap && ctx.cudaDev >= 0 && ctx.rank >= 0 && ctx.rank < ctx.nranks,
                "p2p needs a bootstrap and a CUDA device");
  const int me = ctx.rank, n = ctx.nranks;

  // 1. Who and where. A rank that cannot use its GPU still joins the
  // exchange, so that every rank hears why and falls back together instead
  // of waiting out the bootstrap's timeout.
  std::vector<RankInfo> infos(n);
  RankInfo& mine = infos[me];
  mine.id = localPeerIdentity();
  cudaError_t gpuError = cudaSetDevice(ctx.cudaDev);
  if (gpuError == cudaSuccess) gpuError = cudaDeviceGetPCIBusId(mine.busId, sizeof mine.busId, ctx.cudaDev);
  if (gpuError != cudaSuccess) {
    cudaGetLastError();
    mine.verdict.fail("rank " + std::to_string(me) + " cannot use GPU " + std::to_string(ctx.cudaDev) + ": " +
                      cudaGetErrorString(gpuError));
  } else {
    std::string cuMemWhy;
    mine.cuMemOk = cuMemFdSupported(ctx.cudaDev, &cuMemWhy) ? 1 : 0;
    if (!mine.cuMemOk) RCN_INFO(RCN_LOG_TRANSPORT, "rank %d: no cuMem IPC (%s)", me, cuMemWhy.c_str());
  }
  RCN_CHECK(ctx.bootstrap->allGather(infos.data(), sizeof(RankInfo)));
  *why = firstFailure(infos, infoVerdict);
  if (!why->empty()) return rcnSuccess;  // every rank saw the same verdicts

  auto path = std::unique_ptr<P2pPath>(new P2pPath());
  path->rank_ = me;
  path->cudaDev_ = ctx.cudaDev;
  path->kind_ = chooseKind(infos);
  path->maxBytes_ = ctx.maxBytes;
  path->llMaxBytes_ = std::min<size_t>(ctx.maxBytes, static_cast<size_t>(paramInt(ParamId::LlMaxBytes)));
  path->maxBlocks_ = ctx.maxBlocks;
  path->threads_ = ctx.threads;
  path->timeoutMs_ = ctx.timeoutMs;
  path->launch_.programmaticLaunch = paramBool(ParamId::Pdl);
  const size_t windowValues = static_cast<size_t>(paramInt(ParamId::DeviceWindowBytes)) / 4;
  const RegionLayout layout = regionLayout(n, ctx.maxBytes, ctx.maxBlocks, path->llMaxBytes_, false, windowValues);

  // 2. Verdict and region.
  std::vector<RankRegion> regions(n);
  RankRegion& myRegion = regions[me];
  checkPeerAccess(ctx, infos, &myRegion.verdict);
  FdListener listener;
  if (myRegion.verdict.ok) {
    std::string err;
    const size_t stateBytes = (oneShotStateWords(ctx.maxBlocks) + kDeviceCallSlots) * sizeof(uint32_t);
    bool ok = path->own_.allocate(path->kind_, ctx.cudaDev, layout.totalBytes) == rcnSuccess &&
              cudaMalloc(reinterpret_cast<void**>(&path->state_), stateBytes) == cudaSuccess &&
              zeroDeviceMemory(path->state_, stateBytes) == rcnSuccess &&
              cudaHostAlloc(reinterpret_cast<void**>(&path->host_), sizeof(P2pHostShared), cudaHostAllocMapped) == cudaSuccess;
    if (ok) {
      std::memset(path->host_, 0, sizeof(P2pHostShared));
      myRegion.ptr = reinterpret_cast<uint64_t>(path->own_.ptr());
      myRegion.bytes = path->own_.bytes();
      if (path->kind_ == IpcKind::Legacy) ok = path->own_.exportLegacy(&myRegion.legacy) == rcnSuccess;
      if (path->kind_ == IpcKind::CuMem) {
        ok = listener.open(&err) == rcnSuccess;
        myRegion.endpoint = listener.endpoint();
      }
    }
    if (!ok) {
      cudaGetLastError();
      myRegion.verdict.fail("rank " + std::to_string(me) + " could not set up its exchange region" +
                            (err.empty() ? "" : ": " + err));
    }
  }
  RCN_CHECK(ctx.bootstrap->allGather(regions.data(), sizeof(RankRegion)));
  *why = firstFailure(regions, regionVerdict);
  if (!why->empty()) return rcnSuccess;  // every rank saw the same verdicts

  // 3. Map every peer's region.
  Verdict mapped;
  path->peers_.resize(n);
  std::vector<int> fds;
  if (path->kind_ == IpcKind::CuMem) {
    int myFd = -1;
    std::string err;
    const Deadline deadline = deadlineAfterMs(bootstrapTimeoutMs());
    std::vector<FdEndpoint> endpoints(n);
    for (int r = 0; r < n; ++r) endpoints[r] = regions[r].endpoint;
    if (path->own_.exportFd(&myFd) != rcnSuccess)
      mapped.fail("rank " + std::to_string(me) + " could not export its region");
    // Even without a descriptor of its own a rank must serve its peers'
    // connections; it sends none (-1), which they see as a failed export.
    if (exchangeFds(listener, me, endpoints, myFd, deadline, &fds, &err) != rcnSuccess)
      mapped.fail("rank " + std::to_string(me) + ": " + err);
    if (myFd >= 0) close(myFd);
  }
  for (int p = 0; p < n && mapped.ok; ++p) {
    if (p == me) continue;
    DeviceMapping& peer = path->peers_[p];
    rcnResult_t res = rcnSuccess;
    if (path->kind_ == IpcKind::Local || (path->kind_ == IpcKind::Legacy && sameProcess(infos[p], infos[me]))) {
      int peerDev = -1;
      res = cudaDeviceGetByPCIBusId(&peerDev, infos[p].busId) == cudaSuccess ? rcnSuccess : rcnUnhandledCudaError;
      if (res == rcnSuccess && peerDev != ctx.cudaDev) res = enablePeerAccess(peerDev);
      peer.borrow(reinterpret_cast<void*>(regions[p].ptr), regions[p].bytes);
    } else if (path->kind_ == IpcKind::Legacy) {
      res = peer.importLegacy(regions[p].legacy);
    } else if (fds[p] < 0) {
      res = rcnRemoteError;  // that rank could not export its region: nothing to import
    } else {
      res = peer.importFd(fds[p], regions[p].bytes, ctx.cudaDev);
    }
    if (res != rcnSuccess) {
      cudaGetLastError();
      mapped.fail("rank " + std::to_string(me) + " could not map the exchange region of rank " + std::to_string(p) +
                  " (" + ipcKindName(path->kind_) + ")");
    }
  }
  for (int fd : fds)
    if (fd >= 0) close(fd);
  // Ranks may share this GPU: loaded now, before the verdicts, so that a
  // failure is every rank's to report. (No rank launches a kernel before
  // the configuration all-gather that follows the path's creation.)
  if (mapped.ok && (preloadOneShotKernels() != rcnSuccess || preloadCollectiveKernels() != rcnSuccess ||
                    preloadResidualNormKernels() != rcnSuccess)) {
    cudaGetLastError();
    mapped.fail("rank " + std::to_string(me) + " could not load the all-reduce kernels on GPU " +
                std::to_string(ctx.cudaDev));
  }
  std::vector<Verdict> verdicts(n);
  verdicts[me] = mapped;
  RCN_CHECK(ctx.bootstrap->allGather(verdicts.data(), sizeof(Verdict)));
  *why = firstFailure(verdicts, plainVerdict);
  if (!why->empty()) return rcnSuccess;

  // The kernel's view: every region by rank, this one's included.
  OneShotArgs& args = path->args_;
  args.rank = me;
  args.nranks = n;
  args.maxBlocks = ctx.maxBlocks;
  for (int r = 0; r < n; ++r) args.region[r] = r == me ? path->own_.ptr() : path->peers_[r].ptr();
  args.layout = layout;
  args.state = path->state_;
  void* hostDev = nullptr;
  RCN_CUDA_CHECK(cudaHostGetDevicePointer(&hostDev, path->host_, 0));
  args.error = &static_cast<P2pHostShared*>(hostDev)->error;
  args.abortFlag = &static_cast<P2pHostShared*>(hostDev)->abort;
  args.timeoutNs = ctx.timeoutMs * 1000000ull;
  if (layout.windowValues > 0) describeDeviceComm(args, layout, path->state_ + oneShotStateWords(ctx.maxBlocks),
                                                  &path->device_);

  RCN_INFO(RCN_LOG_TRANSPORT | RCN_LOG_INIT, "rank %d: p2p path over %s, region %zu bytes, LL up to %zu bytes",
           me, ipcKindName(path->kind_), layout.totalBytes, path->llMaxBytes_);
  *out = std::move(path);
  why->clear();
  return rcnSuccess;
}

}  // namespace rcn
