// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_methods.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "sweep_plan.h"

namespace rcn::bench {
namespace {

// Sets environment variables for the duration of one communicator's creation
// (NCCL reads NCCL_ALGO/NCCL_PROTO at init; rocenante its ROCENANTE_* ones)
// and puts back what was there before.
class ScopedEnv {
 public:
  void set(const char* name, const std::string& value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) setenv(it->first.c_str(), it->second->c_str(), 1);
      else unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

struct SharedIds {
  rcnUniqueId rcn[kNumMethods];
  ncclUniqueId nccl[kNumMethods];
  int ok;
  char why[200];
};

struct Status {
  int ok;
  char why[240];
};

// Every rank says whether its part worked; the first failure, named by rank,
// becomes everyone's verdict so all ranks take the same branch.
rcnResult_t agree(World* world, bool ok, const std::string& why, std::string* failure) {
  Status mine{};
  mine.ok = ok ? 1 : 0;
  std::snprintf(mine.why, sizeof mine.why, "%s", why.c_str());
  std::vector<Status> all;
  rcnResult_t res = gatherAll(world->bootstrap.get(), mine, &all);
  if (res != rcnSuccess) return res;
  failure->clear();
  for (int r = 0; r < world->nranks && failure->empty(); ++r)
    if (!all[r].ok) *failure = (world->nranks > 1 ? "rank " + std::to_string(r) + ": " : "") + all[r].why;
  return rcnSuccess;
}

std::string rcnErrorText(rcnResult_t res, rcnComm_t comm) {
  std::string text = rcnGetErrorString(res);
  const char* last = rcnGetLastError(comm);
  if (last && *last) text += std::string(" (") + last + ")";
  return text;
}

std::string ncclErrorText(ncclResult_t res, ncclComm_t comm) {
  std::string text = ncclGetErrorString(res);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += std::string(" (") + last + ")";
  return text;
}

class RcnMethod : public SweepMethod {
 public:
  RcnMethod(int index, rcnComm_t comm, size_t maxBytes, std::string desc)
      : SweepMethod(index), comm_(comm), maxBytes_(maxBytes), desc_(std::move(desc)) {}
  ~RcnMethod() override { rcnCommDestroy(comm_); }
  bool allReduce(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                 cudaStream_t stream, std::string* why) override {
    rcnResult_t res = rcnAllReduce(send, recv, count, dtype, op, comm_, reinterpret_cast<rcnStream_t>(stream));
    if (res == rcnSuccess) return true;
    *why = "rcnAllReduce: " + rcnErrorText(res, comm_);
    return false;
  }
  size_t maxBytes() const override { return maxBytes_; }
  std::string describe() const override { return desc_; }

 private:
  rcnComm_t comm_;
  size_t maxBytes_;
  std::string desc_;
};

class NcclMethod : public SweepMethod {
 public:
  NcclMethod(int index, ncclComm_t comm) : SweepMethod(index), comm_(comm) {}
  ~NcclMethod() override {
    for (ncclWindow_t w : windows_) ncclCommWindowDeregister(comm_, w);
    ncclCommDestroy(comm_);
  }
  bool allReduce(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                 cudaStream_t stream, std::string* why) override {
    // rcnDataType_t and rcnRedOp_t have NCCL's numeric values by construction.
    ncclResult_t res = ncclAllReduce(send, recv, count, static_cast<ncclDataType_t>(dtype),
                                     static_cast<ncclRedOp_t>(op), comm_, stream);
    if (res == ncclSuccess) return true;
    *why = "ncclAllReduce: " + ncclErrorText(res, comm_);
    return false;
  }
  // Registers both pools as symmetric windows (collective).
  bool registerWindows(const Pools& pools, std::string* why) {
    for (void* base : {pools.send, pools.recv}) {
      ncclWindow_t win = nullptr;
      ncclResult_t res = ncclCommWindowRegister(comm_, base, pools.bytes, &win, NCCL_WIN_COLL_SYMMETRIC);
      if (res != ncclSuccess) {
        *why = "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) failed: " + ncclErrorText(res, comm_);
        return false;
      }
      windows_.push_back(win);
    }
    return true;
  }

 private:
  ncclComm_t comm_;
  std::vector<ncclWindow_t> windows_;
};

bool methodSelected(const SweepOptions& opts, int index) {
  if (opts.methods.empty()) return true;
  for (const std::string& m : opts.methods)
    if (m == kMethods[index].name) return true;
  return false;
}

// Rank 0 makes every id; the bootstrap carries them to the other ranks.
rcnResult_t shareIds(const SweepOptions& opts, World* world, bool gpu, SharedIds* ids, std::string* why) {
  SharedIds mine{};
  mine.ok = 1;
  if (world->rank == 0) {
    for (int m = 0; m < kNumMethods && mine.ok; ++m) {
      if (!methodSelected(opts, m)) continue;
      if (!methodIsNccl(m) && rcnGetUniqueId(&mine.rcn[m]) != rcnSuccess) {
        mine.ok = 0;
        std::snprintf(mine.why, sizeof mine.why, "rcnGetUniqueId failed: %s", rcnGetLastError(nullptr));
      }
      if (methodIsNccl(m) && gpu) {
        ncclResult_t res = ncclGetUniqueId(&mine.nccl[m]);
        if (res != ncclSuccess) {
          mine.ok = 0;
          std::snprintf(mine.why, sizeof mine.why, "ncclGetUniqueId failed: %s", ncclGetErrorString(res));
        }
      }
    }
  }
  std::vector<SharedIds> all;
  rcnResult_t res = gatherAll(world->bootstrap.get(), mine, &all);
  if (res != rcnSuccess) {
    *why = "sharing communicator ids over the bootstrap failed";
    return res;
  }
  *ids = all[0];
  if (!ids->ok) {
    *why = std::string("rank 0: ") + ids->why;
    return rcnInternalError;
  }
  return rcnSuccess;
}

std::string commDescription(rcnComm_t comm) {
  rcnCommInfo info{};
  if (rcnCommQuery(comm, &info) != rcnSuccess) return "rcnCommQuery failed";
  char timing[96] = "";
  if (info.selfTestUsFast > 0)
    std::snprintf(timing, sizeof timing, " (%.2f us vs NCCL %.2f us)", info.selfTestUsFast, info.selfTestUsNccl);
  char text[512];
  std::snprintf(text, sizeof text, "transport %s, fast path up to %zu bytes, self-test passed: %s%s; %s",
                info.transport, info.maxBytes, info.selfTestPassed ? "yes" : "no", timing,
                info.reason);
  return text;
}

// Makes one rocenante communicator. forced: the fast path for every size it
// can take, no self-test verdict in the way.
std::unique_ptr<SweepMethod> createRcn(const SweepOptions& opts, World* world, int index,
                                       const rcnUniqueId& id, std::string* why) {
  ScopedEnv env;
  bool forced = kMethods[index].kind == MethodKind::RcnForced;
  if (forced) {
    size_t slot = std::min(opts.oneShotMaxBytes, opts.maxBytes);
    slot = (slot + 15) / 16 * 16;
    env.set("ROCENANTE_FORCE", "rocenante");
    env.set("ROCENANTE_SELFTEST", "0");
    env.set("ROCENANTE_MAX_BYTES", std::to_string(slot));
  }
  rcnComm_t comm = nullptr;
  rcnResult_t res = rcnCommInitRank(&comm, world->nranks, id, world->rank);
  if (res != rcnSuccess) {
    *why = "rcnCommInitRank: " + rcnErrorText(res, nullptr);
    return nullptr;
  }
  rcnCommInfo info{};
  if (rcnCommQuery(comm, &info) != rcnSuccess) {
    *why = "rcnCommQuery failed";
    rcnCommDestroy(comm);
    return nullptr;
  }
  if (forced && info.path == rcnPathNccl) {
    *why = std::string("no rocenante fast path on this communicator: ") + info.reason;
    rcnCommDestroy(comm);
    return nullptr;
  }
  size_t maxBytes = forced ? info.maxBytes : ~static_cast<size_t>(0);
  return std::make_unique<RcnMethod>(index, comm, maxBytes, commDescription(comm));
}

std::unique_ptr<NcclMethod> createNccl(World* world, int index, const ncclUniqueId& id, std::string* why) {
  ScopedEnv env;
  if (kMethods[index].ncclAlgo) env.set("NCCL_ALGO", kMethods[index].ncclAlgo);
  if (kMethods[index].ncclProto) env.set("NCCL_PROTO", kMethods[index].ncclProto);
  ncclComm_t comm = nullptr;
  ncclResult_t res = ncclCommInitRank(&comm, world->nranks, id, world->rank);
  if (res != ncclSuccess) {
    *why = "ncclCommInitRank: " + ncclErrorText(res, nullptr);
    return nullptr;
  }
  return std::make_unique<NcclMethod>(index, comm);
}

// Why a method cannot run at all in this configuration ("" when it can try).
std::string staticUnavailability(int m, bool gpu, int nranks, const Pools& pools) {
  if (kMethods[m].kind == MethodKind::RcnTwoShot)
    return "n/a: rocenante has no two-shot kernel (above its one-shot threshold, calls go to NCCL)";
  // One rank's all-reduce is a copy: a row labelled one-shot would time that copy.
  if (kMethods[m].kind == MethodKind::RcnForced && nranks < 2)
    return "n/a: one rank: rocenante's fast path needs 2 or more ranks";
  if (methodIsNccl(m) && !gpu) return "n/a: no GPU (host backend), so no NCCL";
  if (kMethods[m].symmetric && !pools.ncclMemAlloc) return "unavailable: " + pools.allocNote;
  return "";
}

}  // namespace

rcnResult_t createMethods(const SweepOptions& opts, World* world, bool gpu, Pools* pools, MethodSet* out,
                          std::string* why) {
  out->byIndex.clear();
  out->byIndex.resize(kNumMethods);
  out->unavailable.assign(kNumMethods, "");
  SharedIds ids;
  rcnResult_t res = shareIds(opts, world, gpu, &ids, why);
  if (res != rcnSuccess) return res;
  for (int m = 0; m < kNumMethods; ++m) {
    if (!methodSelected(opts, m)) {
      out->unavailable[m] = "not selected (--methods)";
      continue;
    }
    std::string reason = staticUnavailability(m, gpu, world->nranks, *pools);
    if (!reason.empty()) {
      out->unavailable[m] = reason;
      continue;
    }
    std::string localWhy;
    std::unique_ptr<SweepMethod> method;
    if (methodIsNccl(m)) {
      std::unique_ptr<NcclMethod> nccl = createNccl(world, m, ids.nccl[m], &localWhy);
      if (nccl && kMethods[m].symmetric && !nccl->registerWindows(*pools, &localWhy)) nccl.reset();
      method = std::move(nccl);
    } else {
      method = createRcn(opts, world, m, ids.rcn[m], &localWhy);
    }
    std::string failure;
    res = agree(world, method != nullptr, localWhy, &failure);
    if (res != rcnSuccess) {
      *why = std::string("agreeing on ") + kMethods[m].name + " over the bootstrap failed";
      return res;
    }
    if (!failure.empty()) {
      method.reset();
      out->unavailable[m] = "unavailable: " + failure;
      continue;
    }
    out->byIndex[m] = std::move(method);
  }
  return rcnSuccess;
}

void destroyMethods(MethodSet* set) {
  for (auto& m : set->byIndex) m.reset();
}

rcnResult_t allocPools(size_t bytes, bool gpu, Pools* pools, std::string* why) {
  pools->bytes = bytes;
  pools->host = !gpu;
  if (!gpu) {
    size_t rounded = (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    pools->send = std::aligned_alloc(kSlotAlign, rounded);
    pools->recv = std::aligned_alloc(kSlotAlign, rounded);
    if (!pools->send || !pools->recv) {
      *why = "out of host memory for two " + std::to_string(bytes) + "-byte pools";
      return rcnSystemError;
    }
    return rcnSuccess;
  }
  ncclResult_t a = ncclMemAlloc(&pools->send, bytes);
  ncclResult_t b = a == ncclSuccess ? ncclMemAlloc(&pools->recv, bytes) : a;
  if (a == ncclSuccess && b == ncclSuccess) {
    pools->ncclMemAlloc = true;
    return rcnSuccess;
  }
  pools->allocNote = std::string("ncclMemAlloc failed (") + ncclGetErrorString(b) +
                     "), so the buffers cannot be NCCL symmetric windows";
  if (a == ncclSuccess) ncclMemFree(pools->send);
  pools->send = pools->recv = nullptr;
  if (cudaMalloc(&pools->send, bytes) != cudaSuccess || cudaMalloc(&pools->recv, bytes) != cudaSuccess) {
    *why = "cudaMalloc of two " + std::to_string(bytes) + "-byte pools failed: " +
           cudaGetErrorString(cudaGetLastError());
    return rcnUnhandledCudaError;
  }
  return rcnSuccess;
}

void freePools(Pools* pools) {
  for (void** p : {&pools->send, &pools->recv}) {
    if (!*p) continue;
    if (pools->host) std::free(*p);
    else if (pools->ncclMemAlloc) ncclMemFree(*p);
    else cudaFree(*p);
    *p = nullptr;
  }
}

}  // namespace rcn::bench
