// SPDX-License-Identifier: BSD-3-Clause
// The NCCL calls rocenante intercepts. Everything else forwards untouched
// (forwarders.cc). The user always holds the REAL ncclComm_t; rocenante's
// state hangs off it in a map keyed by that pointer.
//
// Communicator creation: create the real communicator, then build rocenante
// over it (bootstrapping through the communicator itself, no extra port).
// Inside ncclGroupStart/End the real communicator is not ready until the
// outermost ncclGroupEnd, so its setup is deferred there; all communicators
// of that group are then built in parallel threads, one per communicator,
// because their bootstrap exchanges depend on each other (one thread driving
// several GPUs would otherwise wait on itself).
//
// Non-blocking communicators (config->blocking = 0) get no rocenante state:
// building it needs collective exchanges that would block. An INFO line says so.
//
// ncclAllReduce (and ncclAllGather, ncclReduceScatter, routed by the same
// rules) inside a group: a call routed to rocenante is enqueued at
// once, before the group's NCCL work that ncclGroupEnd launches. NCCL gives
// no order between operations of one group, every rank makes the same routing
// decisions in the same order, and our kernel only waits on the GPU
// (bounded), never on the host, so one thread can enqueue rank 0's kernel and
// then rank 1's. Work issued before the group stays ahead of it on the
// stream; what differs from NCCL (work enqueued inside the group, groups over
// several streams, ncclGroupSimulateEnd) is in docs/SHIM.md, "Groups".
#include "plugin/shim.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/bootstrap_nccl.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/device_memory.h"
#include "core/device_scope.h"
#include "core/dtype.h"
#include "core/nccl_lib.h"
#include "core/params.h"
#include "core/rank_threads.h"
#include "plugin/real_nccl.h"

namespace rcn::shim {
namespace {

// What the shim knows about one real communicator.
struct Entry {
  rcnComm* rc = nullptr;            // null: every call forwards to NCCL
  bool blocking = true;             // children of a split inherit this
  std::string why;                  // why rc is null, for rcnShimCommQuery
  std::atomic<uint32_t> routesLogged{0};
  std::atomic<bool> asyncWarned{false};
  std::atomic<bool> suspended{false};  // ncclCommSuspend kept our state; calls go to NCCL
  bool rebuildOnResume = false;        // ncclCommSuspend released our state (rc is null)
};

struct Registry {
  std::shared_mutex mutex;
  std::unordered_map<ncclComm_t, std::shared_ptr<Entry>> entries;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: calls may come during exit
  return *r;
}

std::shared_ptr<Entry> findEntry(ncclComm_t comm) {
  Registry& reg = registry();
  std::shared_lock<std::shared_mutex> lock(reg.mutex);
  auto it = reg.entries.find(comm);
  return it == reg.entries.end() ? nullptr : it->second;
}

void putEntry(ncclComm_t comm, std::shared_ptr<Entry> entry) {
  Registry& reg = registry();
  std::unique_lock<std::shared_mutex> lock(reg.mutex);
  reg.entries[comm] = std::move(entry);
}

std::shared_ptr<Entry> takeEntry(ncclComm_t comm) {
  Registry& reg = registry();
  std::unique_lock<std::shared_mutex> lock(reg.mutex);
  auto it = reg.entries.find(comm);
  if (it == reg.entries.end()) return nullptr;
  std::shared_ptr<Entry> entry = std::move(it->second);
  reg.entries.erase(it);
  return entry;
}

void putForwardOnly(ncclComm_t comm, bool blocking, const std::string& why) {
  auto entry = std::make_shared<Entry>();
  entry->blocking = blocking;
  entry->why = why;
  putEntry(comm, std::move(entry));
}

// A communicator created inside a group. NCCL sets *slot early for
// ncclCommInitRank* but only at the group's end for ncclCommSplit/Shrink, so
// both the value seen at creation and the slot are kept.
struct Pending {
  ncclComm_t* slot;
  ncclComm_t early;
  bool blocking;
};

// Group nesting of this thread, and the communicators created inside it.
thread_local int tlsGroupDepth = 0;
thread_local std::vector<Pending> tlsPending;

// This thread's last failure of ours, with NCCL's last-error text as it was
// then. NCCL's text is process-wide and never cleared, so it changing since
// is what says NCCL failed later (ncclGetLastError).
thread_local bool tlsOursFailed = false;
thread_local std::string tlsNcclTextAtOurFailure;

// Our result as NCCL's (the codes are NCCL's); a failure is noted as above.
ncclResult_t toNccl(rcnResult_t r) {
  if (r != rcnSuccess && r != rcnInProgress) {
    auto fn = realNccl().ncclGetLastError;
    const char* theirs = fn ? fn(nullptr) : nullptr;
    tlsNcclTextAtOurFailure = theirs ? theirs : "";
    tlsOursFailed = true;
  }
  return static_cast<ncclResult_t>(r);
}

// The communicator a pending creation made. NCCL writes an init's handle at
// once and never again, so its slot may be gone by now; a split's or
// shrink's (early null) is written at the group's end.
ncclComm_t pendingComm(const Pending& p) { return p.early ? p.early : p.slot ? *p.slot : nullptr; }

// Inside a group, a new communicator is ready only at the outermost
// ncclGroupEnd: its setup waits there. False outside a group.
bool deferToGroupEnd(ncclComm_t* slot, bool blocking) {
  if (tlsGroupDepth == 0) return false;
  tlsPending.push_back({slot, *slot, blocking});
  return true;
}

// A communicator destroyed or aborted inside the group that made it is no
// longer set up at the group's end.
void forgetPending(ncclComm_t comm) {
  if (!comm) return;
  auto gone = [&](const Pending& p) { return pendingComm(p) == comm; };
  tlsPending.erase(std::remove_if(tlsPending.begin(), tlsPending.end(), gone), tlsPending.end());
}



std::string ownLibraryPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ownLibraryPath), &info) && info.dli_fname) return info.dli_fname;
  return "";
}

// With ROCENANTE_TUNER=1, makes NCCL load our tuner plugin unless
// NCCL_TUNER_PLUGIN is set: NCCL reads it when its first communicator is
// created, so this runs before every real communicator creation (it acts
// once). Off by default: see docs/SHIM.md for what it would displace.
void installTunerOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!paramBool(ParamId::Tuner) || paramBool(ParamId::Disable)) return;
    if (const char* named = getenv("NCCL_TUNER_PLUGIN")) {
      RCN_INFO(RCN_LOG_TUNE, "NCCL_TUNER_PLUGIN=%s named by the user; rocenante's tuner stays off", named);
      return;
    }
    std::string self = ownLibraryPath();
    if (self.empty()) return;
    setenv("NCCL_TUNER_PLUGIN", self.c_str(), 0);
    RCN_INFO(RCN_LOG_TUNE, "set NCCL_TUNER_PLUGIN=%s (rocenante's tuner for the calls NCCL keeps)",
             self.c_str());
  });
}

// Whether NCCL makes the communicator blocking: NCCL_COMM_BLOCKING, when
// set to an integer, overrides the config (as NCCL's own override does).
bool configBlocking(const ncclConfig_t* config, bool inherited) {
  const char* env = std::getenv("NCCL_COMM_BLOCKING");
  int64_t forced = 0;
  std::string unparsed;
  if (env && *env && parseIntText(env, &forced, &unparsed)) return forced != 0;
  if (!config) return inherited;
  return config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
}

// Builds rocenante's state over a ready real communicator on this thread.
rcnResult_t attach(ncclComm_t comm) {
  const RealNccl& real = realNccl();
  if (paramBool(ParamId::Disable)) {
    putForwardOnly(comm, true, "disabled by ROCENANTE_DISABLE");
    return rcnSuccess;
  }
  int nranks = 0, rank = 0, dev = -1;
  if (!real.ncclCommCount || !real.ncclCommUserRank || !real.ncclCommCuDevice ||
      real.ncclCommCount(comm, &nranks) != ncclSuccess || real.ncclCommUserRank(comm, &rank) != ncclSuccess ||
      real.ncclCommCuDevice(comm, &dev) != ncclSuccess) {
    RCN_WARN(RCN_LOG_SHIM, "NCCL comm %p: cannot read its rank, size or device", (void*)comm);
    return rcnInternalError;
  }
  if (nranks < 2) {
    // A malformed ROCENANTE_* fails creation here too (PARAMS.md); commCreate checks the others.
    RCN_CHECK(paramValidate());
    putForwardOnly(comm, true, "a single-rank communicator: nothing to exchange");
    RCN_INFO(RCN_LOG_SHIM, "NCCL comm %p dev %d: a single-rank communicator; every call goes to NCCL",
             (void*)comm, dev);
    return rcnSuccess;
  }
  const NcclApi* core = nullptr;
  if (ncclApi(&core) != rcnSuccess) {
    RCN_WARN(RCN_LOG_SHIM, "NCCL comm %p: the real NCCL (%s) lacks entry points rocenante needs (a warning "
             "when it was loaded names them); ROCENANTE_DISABLE=1 runs it plain", (void*)comm, ncclLibraryPath());
    return rcnSystemError;
  }
  RCN_CUDA_CHECK(cudaSetDevice(dev));
  RelaxedCaptureScope relaxed;  // as in commCreate: the bootstrap makes a stream and a buffer too
  std::unique_ptr<NcclBootstrap> boot;
  RCN_CHECK(bootstrapInitNccl(comm, rank, nranks, dev, &boot));
  NcclBootstrap* bootView = boot.get();
  CommInitArgs args;
  args.rank = rank;
  args.nranks = nranks;
  args.cudaDev = dev;
  args.bootstrap = std::move(boot);
  args.existingNccl = comm;
  args.createNccl = false;
  rcnComm* rc = nullptr;
  RCN_CHECK(commCreate(std::move(args), &rc));
  bootView->close();  // rc owns it; nothing more goes over the user's comm
  auto entry = std::make_shared<Entry>();
  entry->rc = rc;
  putEntry(comm, std::move(entry));
  RCN_INFO(RCN_LOG_SHIM, "NCCL comm %p rank %d/%d dev %d: small all-reduces take %s (up to %zu bytes): %s",
           (void*)comm, rank, nranks, dev, rc->info.transport, rc->info.maxBytes, rc->info.reason);
  return rcnSuccess;
}

// Attaches several communicators at once, one thread each (their bootstrap
// exchanges need each other). Returns the first failure that is not a peer
// giving up (rcnRemoteError), and makes its warning this thread's last error.
rcnResult_t attachAll(const std::vector<ncclComm_t>& comms) {
  if (comms.size() == 1) {
    DeviceScope keep;
    return attach(comms[0]);
  }
  const RankFailure failure = runRankThreads(
      static_cast<int>(comms.size()), [&](int i) { return attach(comms[i]); }, nullptr);
  if (failure.rank < 0) return rcnSuccess;
  if (!failure.cause.empty()) setLastError(failure.cause);  // for setupFailure
  return failure.result;
}

// Why a setup failed, for the warning that replaces it as the last error:
// the result's name, and this thread's last warning (the cause, where the
// setup ran on this thread).
std::string setupFailure(rcnResult_t r) {
  const std::string cause = lastErrorText();
  return std::string(rcnGetErrorString(r)) + (cause.empty() ? "" : ": " + cause);
}

// After a real creation call: attach now, defer to the group's end, or leave
// rocenante off for a non-blocking communicator. On failure the new real
// communicator is aborted and the error returned, so no rank runs with a
// routing that its peers do not share.
ncclResult_t afterCreate(ncclResult_t created, ncclComm_t* newcomm, bool blocking, const char* caller) {
  clearLastError();  // what ncclGetLastError reports must come from this call
  if (created != ncclSuccess && created != ncclInProgress) return created;
  if (deferToGroupEnd(newcomm, blocking && created == ncclSuccess)) return created;
  ncclComm_t comm = *newcomm;
  if (!comm) return created;  // e.g. NCCL_SPLIT_NOCOLOR
  if (!blocking || created == ncclInProgress) {
    putForwardOnly(comm, false, "non-blocking communicator (config->blocking=0)");
    RCN_INFO(RCN_LOG_SHIM, "%s: NCCL comm %p is non-blocking; rocenante stays off for it", caller,
             (void*)comm);
    return created;
  }
  DeviceScope keep;
  rcnResult_t r = attach(comm);
  if (r == rcnSuccess) return ncclSuccess;
  RCN_WARN(RCN_LOG_SHIM, "%s: rocenante could not set up NCCL comm %p (%s); the communicator is "
           "aborted. ROCENANTE_DISABLE=1 runs plain NCCL", caller, (void*)comm, setupFailure(r).c_str());
  takeEntry(comm);
  if (auto abort = realNccl().ncclCommAbort) abort(comm);
  *newcomm = nullptr;
  return toNccl(r);
}

// Logs at INFO the first call of each collective and route on a
// communicator, so ROCENANTE_DEBUG=INFO shows where calls go without a line
// per call. Two bits per collective in routesLogged: fast path, NCCL.
void logFirstRoute(Entry& entry, Collective coll, size_t bytes, rcnDataType_t dtype, rcnRedOp_t op,
                   cudaStream_t stream) {
  const uint32_t both = 3u << (2 * static_cast<int>(coll));
  if (!logEnabled(kLogInfo, RCN_LOG_SHIM) || (entry.routesLogged.load(std::memory_order_relaxed) & both) == both)
    return;
  rcnComm* rc = entry.rc;
  const bool fast = commTakesFastPath(rc, coll, bytes, dtype, op, stream);
  const uint32_t bit = (fast ? 1u : 2u) << (2 * static_cast<int>(coll));
  if (entry.routesLogged.fetch_or(bit) & bit) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool capturing = cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
                         capture == cudaStreamCaptureStatusActive;
  RCN_INFO(RCN_LOG_SHIM, "rank %d: first %s %s: %zu bytes %s %s%s", rc->rank, collectiveName(coll),
           fast ? "on the rocenante path" : "sent to NCCL", bytes, dtypeName(dtype), opName(op),
           capturing ? " (graph capture)" : "");
}

// The entry of a call rocenante may route, or null to forward it untouched:
// user-made ops (ncclRedOpCreatePreMulSum) and anything odd (a count whose
// byte size wraps, over `shares` ranks' shares) go to NCCL, which checks
// arguments with its own messages.
std::shared_ptr<Entry> routableEntry(ncclComm_t comm, const void* sendbuff, const void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, bool shares) {
  const bool plain = datatype >= 0 && datatype < ncclNumTypes && op >= 0 && op < ncclNumOps && count > 0 &&
                     byteCountFits(count, static_cast<rcnDataType_t>(datatype)) && sendbuff && recvbuff;
  std::shared_ptr<Entry> entry = plain ? findEntry(comm) : nullptr;
  // A suspended communicator's calls go to NCCL, which refuses them by its own rule.
  if (!entry || !entry->rc || entry->suspended) return nullptr;
  const size_t whole = count * dtypeSize(static_cast<rcnDataType_t>(datatype));
  if (shares && whole > SIZE_MAX / static_cast<size_t>(entry->rc->nranks)) return nullptr;
  return entry;
}

}  // namespace

ncclResult_t shim_ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  installTunerOnce();
  auto fn = realNccl().ncclCommInitRank;
  if (!fn) return reportMissing("ncclCommInitRank"), ncclInvalidUsage;
  return afterCreate(fn(comm, nranks, commId, rank), comm, true, "ncclCommInitRank");
}

ncclResult_t shim_ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                         ncclConfig_t* config) {
  installTunerOnce();
  auto fn = realNccl().ncclCommInitRankConfig;
  if (!fn) return reportMissing("ncclCommInitRankConfig"), ncclInvalidUsage;
  return afterCreate(fn(comm, nranks, commId, rank, config), comm, configBlocking(config, true),
                     "ncclCommInitRankConfig");
}

ncclResult_t shim_ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                           ncclUniqueId* commIds, ncclConfig_t* config) {
  installTunerOnce();
  auto fn = realNccl().ncclCommInitRankScalable;
  if (!fn) return reportMissing("ncclCommInitRankScalable"), ncclInvalidUsage;
  return afterCreate(fn(newcomm, nranks, myrank, nId, commIds, config), newcomm,
                     configBlocking(config, true), "ncclCommInitRankScalable");
}

ncclResult_t shim_ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  installTunerOnce();
  auto fn = realNccl().ncclCommInitAll;
  if (!fn) return reportMissing("ncclCommInitAll"), ncclInvalidUsage;
  ncclResult_t created = fn(comms, ndev, devlist);
  clearLastError();
  if (created != ncclSuccess || ndev <= 0) return created;
  if (tlsGroupDepth > 0) {
    for (int i = 0; i < ndev; ++i) deferToGroupEnd(&comms[i], true);
    return created;
  }
  std::vector<ncclComm_t> list(comms, comms + ndev);
  rcnResult_t r = attachAll(list);
  if (r == rcnSuccess) return ncclSuccess;
  RCN_WARN(RCN_LOG_SHIM, "ncclCommInitAll: rocenante could not set up the %d communicators (%s); "
           "they are aborted. ROCENANTE_DISABLE=1 runs plain NCCL", ndev, setupFailure(r).c_str());
  for (int i = 0; i < ndev; ++i) {
    if (auto entry = takeEntry(comms[i]); entry && entry->rc) commAbort(entry->rc);
    if (auto abort = realNccl().ncclCommAbort) abort(comms[i]);
    comms[i] = nullptr;
  }
  return toNccl(r);
}

ncclResult_t shim_ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                ncclConfig_t* config) {
  auto fn = realNccl().ncclCommSplit;
  if (!fn) return reportMissing("ncclCommSplit"), ncclInvalidUsage;
  auto parent = findEntry(comm);
  bool blocking = configBlocking(config, parent ? parent->blocking : true);
  return afterCreate(fn(comm, color, key, newcomm, config), newcomm, blocking, "ncclCommSplit");
}

ncclResult_t shim_ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                 ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  auto fn = realNccl().ncclCommShrink;
  if (!fn) return reportMissing("ncclCommShrink"), ncclInvalidUsage;
  auto parent = findEntry(comm);
  // NCCL_SHRINK_ABORT ends the parent's operations in flight, ours too (as
  // ncclCommRevoke does): the shrink is how a job drops a dead rank, and NCCL
  // checks the parent's async error (ours, which names that rank) first.
  if (parent && parent->rc && (shrinkFlags & NCCL_SHRINK_ABORT)) commStop(parent->rc);
  bool blocking = configBlocking(config, parent ? parent->blocking : true);
  return afterCreate(fn(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags),
                     newcomm, blocking, "ncclCommShrink");
}

ncclResult_t shim_ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
                               ncclConfig_t* config) {
  installTunerOnce();
  auto fn = realNccl().ncclCommGrow;
  if (!fn) return reportMissing("ncclCommGrow"), ncclInvalidUsage;
  auto parent = comm ? findEntry(comm) : nullptr;  // a joining rank has no parent
  bool blocking = configBlocking(config, parent ? parent->blocking : true);
  return afterCreate(fn(comm, nRanks, uniqueId, rank, newcomm, config), newcomm, blocking, "ncclCommGrow");
}

// NCCL_SUSPEND_MEM of NCCL 2.29+: release the communicator's memory while suspended.
constexpr int kSuspendMem = 0x01;

// A suspended communicator cannot be used until ncclCommResume (NCCL's rule).
// With NCCL_SUSPEND_MEM, NCCL releases its memory: ours (the fast path's
// buffers, peers' mappings) is released too, by tearing our state down, and
// rebuilt at resume, at new addresses. So where a CUDA graph captured our
// kernel (the graph holds the old addresses, and NCCL's graphs stay valid
// across a suspend: vLLM keeps its graphs through sleep), ours is kept.
// Without the flag NCCL keeps its memory, and we keep ours. Calls in between
// go to NCCL, which refuses them. NCCL's suspend goes first: where it fails,
// nothing of ours changes.
ncclResult_t shim_ncclCommSuspend(ncclComm_t comm, int flags) {
  auto fn = realNccl().ncclCommSuspend;
  if (!fn) return reportMissing("ncclCommSuspend"), ncclInvalidUsage;
  ncclResult_t res = fn(comm, flags);
  auto entry = findEntry(comm);
  if (res != ncclSuccess || !entry || !entry->rc) return res;
  const bool captured = entry->rc->fastPathCaptured.load(std::memory_order_relaxed);
  if (!(flags & kSuspendMem) || captured) {
    entry->suspended = true;
    RCN_INFO(RCN_LOG_SHIM, "NCCL comm %p suspended; rocenante keeps its fast path for ncclCommResume%s", (void*)comm,
             (flags & kSuspendMem) ? " (a CUDA graph holds its buffers' addresses)" : "");
    return res;
  }
  auto released = std::make_shared<Entry>();
  released->why = "suspended with NCCL_SUSPEND_MEM: the fast path is released until ncclCommResume";
  released->rebuildOnResume = true;
  entry = takeEntry(comm);
  putEntry(comm, released);
  DeviceScope keep;
  ncclResult_t ours = toNccl(commDestroy(entry->rc));
  RCN_INFO(RCN_LOG_SHIM, "NCCL comm %p suspended with NCCL_SUSPEND_MEM; rocenante's fast path is released",
           (void*)comm);
  return ours;
}

// Resume after NCCL's: a fast path kept at suspend works again; one released
// there is rebuilt over the communicator, as at creation (every rank resumes,
// and the rebuild exchanges with the peers; inside a group, at its end).
// Where the rebuild fails, the communicator stays on plain NCCL and the error
// is returned: peers whose rebuild succeeded may route small all-reduces to
// rocenante, so abort it.
ncclResult_t shim_ncclCommResume(ncclComm_t comm) {
  auto fn = realNccl().ncclCommResume;
  if (!fn) return reportMissing("ncclCommResume"), ncclInvalidUsage;
  ncclResult_t res = fn(comm);
  auto entry = findEntry(comm);
  if (res != ncclSuccess || !entry) return res;
  entry->suspended = false;
  if (!entry->rebuildOnResume) return res;
  // One thread resuming several communicators (one per GPU) inside a group:
  // their rebuilds exchange with each other, so they run at the group's end,
  // one thread each, as creation inside a group does.
  if (tlsGroupDepth > 0) {
    tlsPending.push_back({nullptr, comm, true});
    return res;
  }
  clearLastError();  // a failure's cause, below, must come from this rebuild
  DeviceScope keep;
  rcnResult_t r = attach(comm);
  if (r == rcnSuccess) return ncclSuccess;
  RCN_WARN(RCN_LOG_SHIM,
           "ncclCommResume: rocenante could not rebuild its state over NCCL comm %p (%s); it "
           "runs plain NCCL now, while peers may not: abort it. ROCENANTE_DISABLE=1 runs plain NCCL",
           (void*)comm, setupFailure(r).c_str());
  putForwardOnly(comm, true, "its rebuild at ncclCommResume failed");
  return toNccl(r);
}

ncclResult_t shim_ncclCommFinalize(ncclComm_t comm) {
  // NCCL flushes its own work; ours is ordered on the user's streams and is
  // released at ncclCommDestroy.
  auto fn = realNccl().ncclCommFinalize;
  if (!fn) return reportMissing("ncclCommFinalize"), ncclInvalidUsage;
  return fn(comm);
}

ncclResult_t shim_ncclCommDestroy(ncclComm_t comm) {
  auto fn = realNccl().ncclCommDestroy;
  if (!fn) return reportMissing("ncclCommDestroy"), ncclInvalidUsage;
  ncclResult_t ours = ncclSuccess;
  if (auto entry = takeEntry(comm); entry && entry->rc) {
    DeviceScope keep;
    ours = toNccl(commDestroy(entry->rc));
  }
  ncclResult_t theirs = fn(comm);
  if (theirs == ncclSuccess) forgetPending(comm);  // a refused destroy leaves it to the group's setup
  return theirs != ncclSuccess ? theirs : ours;
}

ncclResult_t shim_ncclCommAbort(ncclComm_t comm) {
  auto fn = realNccl().ncclCommAbort;
  if (!fn) return reportMissing("ncclCommAbort"), ncclInvalidUsage;
  auto entry = takeEntry(comm);
  // Stop our kernels' waits first, then NCCL's, and only then tear down:
  // tear-down waits (at most ROCENANTE_TIMEOUT_MS) for the device, which
  // drains only once NCCL's kernels are gone too.
  if (entry && entry->rc) {
    commStop(entry->rc);
    // An all-reduce on another thread that passed its abort check just
    // before may be on its way into NCCL with this communicator, which NCCL
    // is about to free. It is back within microseconds unless NCCL blocks
    // it, and then only NCCL's abort releases it: so wait, but briefly.
    if (!commWaitForCalls(entry->rc, deadlineAfterMs(kCallsIntoNcclMs)))
      RCN_WARN(RCN_LOG_SHIM, "ncclCommAbort: NCCL comm %p still has a call inside after %lld ms; aborting NCCL "
               "under it", (void*)comm, (long long)kCallsIntoNcclMs);
  }
  ncclResult_t theirs = fn(comm);
  forgetPending(comm);  // an abort frees it whatever NCCL returns
  if (entry && entry->rc) {
    DeviceScope keep;
    commAbort(entry->rc);
  }
  return theirs;
}

// Revoke stops NCCL's operations in flight and fails later ones. Ours stop
// too, and every later all-reduce fails here (small ones would otherwise run
// on the fast path as if nothing happened; NCCL fails the large ones anyway);
// destroy or abort still frees us. Ours stop first: a kernel of ours waiting
// for a peer would hold NCCL's work queued behind it on the stream. Flags
// NCCL refuses (any but NCCL_REVOKE_DEFAULT) leave both running.
ncclResult_t shim_ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  auto fn = realNccl().ncclCommRevoke;
  if (!fn) return reportMissing("ncclCommRevoke"), ncclInvalidUsage;
  if (revokeFlags != 0) return fn(comm, revokeFlags);  // NCCL_REVOKE_DEFAULT
  if (auto entry = findEntry(comm); entry && entry->rc) commStop(entry->rc);
  return fn(comm, revokeFlags);
}

ncclResult_t shim_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  auto fn = realNccl().ncclCommGetAsyncError;
  if (!fn) return reportMissing("ncclCommGetAsyncError"), ncclInvalidUsage;
  ncclResult_t res = fn(comm, asyncError);
  if (res != ncclSuccess || !asyncError || *asyncError != ncclSuccess) return res;
  auto entry = findEntry(comm);
  if (!entry || !entry->rc) return res;
  CommCallScope call(entry->rc);  // an abort on another thread waits for us
  if (!commUsable(entry->rc) || !entry->rc->fast) return res;
  std::string why;
  rcnResult_t ours = entry->rc->fast->asyncError(&why);
  if (ours == rcnSuccess) return res;
  *asyncError = toNccl(ours);
  if (!entry->asyncWarned.exchange(true))
    RCN_WARN(RCN_LOG_SHIM, "NCCL comm %p: rocenante recorded an asynchronous error: %s", (void*)comm,
             why.c_str());
  return res;
}

ncclResult_t shim_ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  auto fn = realNccl().ncclAllReduce;
  if (!fn) return reportMissing("ncclAllReduce"), ncclInvalidUsage;
  std::shared_ptr<Entry> entry = routableEntry(comm, sendbuff, recvbuff, count, datatype, op, /*shares=*/false);
  if (!entry) return fn(sendbuff, recvbuff, count, datatype, op, comm, stream);
  auto dtype = static_cast<rcnDataType_t>(datatype);
  auto rop = static_cast<rcnRedOp_t>(op);
  CommCallScope call(entry->rc);  // an abort on another thread waits for us
  if (commUsable(entry->rc)) logFirstRoute(*entry, Collective::AllReduce, count * dtypeSize(dtype), dtype, rop, stream);
  return toNccl(commAllReduce(entry->rc, sendbuff, recvbuff, count, dtype, rop, stream));
}

ncclResult_t shim_ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                ncclComm_t comm, cudaStream_t stream) {
  auto fn = realNccl().ncclAllGather;
  if (!fn) return reportMissing("ncclAllGather"), ncclInvalidUsage;
  std::shared_ptr<Entry> entry = routableEntry(comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, true);
  if (!entry) return fn(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  auto dtype = static_cast<rcnDataType_t>(datatype);
  CommCallScope call(entry->rc);
  if (commUsable(entry->rc))
    logFirstRoute(*entry, Collective::AllGather, sendcount * dtypeSize(dtype) * entry->rc->nranks, dtype, rcnSum,
                  stream);
  return toNccl(commAllGather(entry->rc, sendbuff, recvbuff, sendcount, dtype, stream));
}

ncclResult_t shim_ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  auto fn = realNccl().ncclReduceScatter;
  if (!fn) return reportMissing("ncclReduceScatter"), ncclInvalidUsage;
  std::shared_ptr<Entry> entry = routableEntry(comm, sendbuff, recvbuff, recvcount, datatype, op, true);
  if (!entry) return fn(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  auto dtype = static_cast<rcnDataType_t>(datatype);
  auto rop = static_cast<rcnRedOp_t>(op);
  CommCallScope call(entry->rc);
  if (commUsable(entry->rc))
    logFirstRoute(*entry, Collective::ReduceScatter, recvcount * dtypeSize(dtype) * entry->rc->nranks, dtype, rop,
                  stream);
  return toNccl(commReduceScatter(entry->rc, sendbuff, recvbuff, recvcount, dtype, rop, stream));
}

const char* shim_ncclGetErrorString(ncclResult_t result) {
  // Without a real NCCL, our own table: the codes are NCCL's (rocenante.h).
  auto fn = realNccl().ncclGetErrorString;
  return fn ? fn(result) : rcnGetErrorString(static_cast<rcnResult_t>(result));
}

const char* shim_ncclGetLastError(ncclComm_t comm) {
  // Ours (this thread's last WARN, e.g. a malformed policy file that failed
  // ncclCommInitRank) when our failure came after NCCL's last text, else
  // NCCL's own, so that frameworks printing "last error" show why.
  auto fn = realNccl().ncclGetLastError;
  const char* theirs = fn ? fn(comm) : nullptr;
  const char* ours = lastErrorText();
  const bool oursIsLater = tlsOursFailed && ours && *ours && tlsNcclTextAtOurFailure == (theirs ? theirs : "");
  if (oursIsLater) return ours;
  if (theirs && *theirs) return theirs;
  return ours && *ours ? ours : (theirs ? theirs : "");
}

ncclResult_t shim_ncclGroupStart() {
  auto fn = realNccl().ncclGroupStart;
  if (!fn) return reportMissing("ncclGroupStart"), ncclInvalidUsage;
  ncclResult_t res = fn();
  if (res == ncclSuccess) ++tlsGroupDepth;
  return res;
}

ncclResult_t shim_ncclGroupEnd() {
  auto fn = realNccl().ncclGroupEnd;
  if (!fn) return reportMissing("ncclGroupEnd"), ncclInvalidUsage;
  ncclResult_t res = fn();
  if (tlsGroupDepth > 0) --tlsGroupDepth;
  if (tlsGroupDepth > 0 || tlsPending.empty()) return res;
  std::vector<Pending> pending;
  pending.swap(tlsPending);
  std::vector<ncclComm_t> ready;
  for (const Pending& p : pending) {
    ncclComm_t comm = pendingComm(p);
    if (!comm) continue;  // NCCL_SPLIT_NOCOLOR, or creation failed
    if (p.blocking && res == ncclSuccess) {
      putForwardOnly(comm, true, "rocenante setup at ncclGroupEnd did not complete");
      ready.push_back(comm);
    } else {
      putForwardOnly(comm, p.blocking, p.blocking ? "its group ended with an error or in progress"
                                                  : "non-blocking communicator (config->blocking=0)");
    }
  }
  if (res != ncclSuccess || ready.empty()) {
    if (pending.size() != ready.size())
      RCN_INFO(RCN_LOG_SHIM, "ncclGroupEnd returned %d: rocenante stays off for %zu communicators "
               "created in the group (non-blocking or not ready)", static_cast<int>(res),
               pending.size() - ready.size());
    return res;
  }
  clearLastError();  // a failure's cause, below, must come from this setup
  rcnResult_t r = attachAll(ready);
  if (r == rcnSuccess) return ncclSuccess;
  RCN_WARN(RCN_LOG_SHIM, "ncclGroupEnd: rocenante could not set up the %zu communicators created in "
           "the group (%s); abort them. ROCENANTE_DISABLE=1 runs plain NCCL", ready.size(),
           setupFailure(r).c_str());
  return toNccl(r);
}

ncclResult_t shim_ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  // Ends the group without launching anything: communicators created in it
  // stay without rocenante state.
  auto fn = realNccl().ncclGroupSimulateEnd;
  if (!fn) return reportMissing("ncclGroupSimulateEnd"), ncclInvalidUsage;
  ncclResult_t res = fn(simInfo);
  if (tlsGroupDepth > 0) --tlsGroupDepth;
  if (tlsGroupDepth == 0) tlsPending.clear();
  return res;
}

}  // namespace rcn::shim

extern "C" rcnResult_t rcnShimCommQuery(ncclComm_t comm, rcnCommInfo* info) {
  rcn::clearLastError();  // as every rcn* entry point
  RCN_ARG_CHECK(info != nullptr, "rcnShimCommQuery: info is NULL");
  auto entry = rcn::shim::findEntry(comm);
  RCN_ARG_CHECK(entry != nullptr, "rcnShimCommQuery: %p is not an NCCL communicator the shim created",
                (void*)comm);
  if (entry->rc) {
    *info = entry->rc->info;
    return rcnSuccess;
  }
  memset(info, 0, sizeof *info);
  info->path = rcnPathNccl;
  info->cudaDev = -1;
  snprintf(info->transport, sizeof info->transport, "nccl");
  snprintf(info->reason, sizeof info->reason, "%s", entry->why.c_str());
  return rcnSuccess;
}
