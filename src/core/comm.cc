// SPDX-License-Identifier: BSD-3-Clause
#include "core/comm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "core/check.h"
#include "core/deadline.h"
#include "core/device_drain.h"
#include "core/device_memory.h"
#include "core/dtype.h"
#include "core/launch_env.h"
#include "core/nccl_lib.h"
#include "core/params.h"
#include "core/selftest.h"
#include "topology/topology.h"
#include "transport/transport.h"

namespace rcn {
namespace {

constexpr size_t kHostMinSlotBytes = 64 * 1024;


// The device this rank runs on, or -1 for the host backend. ncclBuffers:
// the shim builds over an NCCL communicator, whose buffers live on a GPU
// wherever there is one.
rcnResult_t pickDevice(int requested, bool ncclBuffers, int* cudaDev) {
  std::string backend;
  RCN_CHECK(paramChoice(ParamId::Backend, &backend));  // first, so a typo fails without GPUs too
  RCN_ARG_CHECK(!(ncclBuffers && backend == "host" && rcn::visibleGpuCount() > 0),
                "ROCENANTE_BACKEND=host cannot serve an NCCL communicator: its buffers are GPU memory, which "
                "the host backend's CPU copies cannot read");
  if (backend == "host" || (backend != "gpu" && rcn::visibleGpuCount() == 0)) {
    *cudaDev = -1;
    return rcnSuccess;
  }
  if (requested >= 0) {
    RCN_CUDA_CHECK(cudaSetDevice(requested));
    *cudaDev = requested;
  } else {
    RCN_CUDA_CHECK(cudaGetDevice(cudaDev));
  }
  return rcnSuccess;
}

// Every rank says whether it makes the native API's NCCL communicator
// (ROCENANTE_NATIVE_NCCL), and they agree before any of them asks NCCL for
// anything: one that skipped ncclCommInitRank would leave the others in it,
// unbounded. Then rank 0 makes the unique id and every rank receives it over
// our bootstrap.
rcnResult_t createNcclComm(rcnComm* comm) {
  std::vector<int32_t> wanted(comm->nranks);
  const int32_t mine = paramBool(ParamId::NativeNccl) ? 1 : 0;
  wanted[comm->rank] = mine;
  RCN_CHECK(comm->bootstrap->allGather(wanted.data(), sizeof(int32_t)));
  for (int r = 0; r < comm->nranks; ++r)
    RCN_ARG_CHECK(wanted[r] == mine, "ROCENANTE_NATIVE_NCCL differs between ranks: %d on rank %d, %d on rank %d "
                  "(every rank must set it alike)", mine, comm->rank, wanted[r], r);
  if (!mine) {
    RCN_INFO(RCN_LOG_INIT, "rank %d/%d: no NCCL communicator (ROCENANTE_NATIVE_NCCL=0): calls the fast path "
             "cannot take will fail", comm->rank, comm->nranks);
    return rcnSuccess;
  }
  const NcclApi* nccl = nullptr;
  RCN_CHECK(ncclApi(&nccl));
  std::vector<ncclUniqueId> ids(comm->nranks);
  if (comm->rank == 0) RCN_NCCL_CHECK(nccl, getUniqueId(&ids[0]));
  RCN_CHECK(comm->bootstrap->allGather(ids.data(), sizeof(ncclUniqueId)));
  RCN_NCCL_CHECK(nccl, commInitRank(&comm->nccl, comm->nranks, ids[0], comm->rank));
  comm->ownsNccl = true;
  return rcnSuccess;
}

rcnResult_t parseTransport(TransportKind* kind) {
  std::string text;
  RCN_CHECK(paramChoice(ParamId::Transport, &text));
  if (text == "p2p") *kind = TransportKind::P2p;
  else if (text == "proxy") *kind = TransportKind::Proxy;
  else if (text == "host") *kind = TransportKind::Host;
  else *kind = TransportKind::Auto;
  return rcnSuccess;
}

// Auto: nothing on a partial topology (a 4+ node physical ring: NCCL's ring
// fits it better; on the host backend creation then fails, see buildComm),
// else the host path without a GPU, p2p where every GPU pair of one host has
// peer access, the proxy path where nodes (or GPUs without peer access) all
// reach each other.
TransportKind autoTransport(const rcnComm* comm, const CommTopo& topo, std::string* why) {
  if (topo.cls == TopoClass::MultiNodePartial) {
    *why = "topology: " + topo.reason;
    return TransportKind::Auto;  // none
  }
  if (comm->cudaDev < 0) return TransportKind::Host;
  if (topo.cls == TopoClass::SingleHost && topo.p2pEligible) return TransportKind::P2p;
  if (topo.cls == TopoClass::SingleHost || topo.cls == TopoClass::MultiNodeAnyToAny)
    return TransportKind::Proxy;
  *why = "topology: " + topo.reason;
  return TransportKind::Auto;  // none
}

rcnPath_t pathOf(TransportKind kind) {
  switch (kind) {
    case TransportKind::P2p: return rcnPathP2p;
    case TransportKind::Proxy: return rcnPathProxy;
    case TransportKind::Host: return rcnPathHost;
    default: return rcnPathNccl;
  }
}

// Chooses the transport, loads the policy for it (its thresholds size the
// exchange slots) and builds the fast path. Collective: every rank takes the
// same branches, since the topology and the parameters are agreed.
rcnResult_t buildFastPath(rcnComm* comm, const CommTopo& topo, std::string* why) {
  TransportKind kind;
  RCN_CHECK(parseTransport(&kind));
  // The host path moves the buffers with the CPU, which cannot read a GPU's.
  RCN_ARG_CHECK(kind != TransportKind::Host || comm->cudaDev < 0,
                "ROCENANTE_TRANSPORT=host needs the host backend (ROCENANTE_BACKEND=host), but rank %d runs on "
                "GPU %d", comm->rank, comm->cudaDev);
  if (kind == TransportKind::Auto) kind = autoTransport(comm, topo, why);
  RCN_CHECK(policyLoad(topo.cls, pathOf(kind), comm->nranks, &comm->policy));
  if (kind == TransportKind::Auto) return rcnSuccess;  // no fast path fits this topology
  FastPathContext ctx;
  ctx.rank = comm->rank;
  ctx.nranks = comm->nranks;
  ctx.cudaDev = comm->cudaDev;
  size_t largest = std::max(comm->policy.oneShotMaxBytes, comm->policy.oneShotMaxBytesGraph);
  // The host backend takes every size in slot-sized chunks, so its slots must
  // be useful even where the policy routes nothing to the one-shot.
  if (comm->cudaDev < 0) largest = std::max<size_t>(largest, kHostMinSlotBytes);
  ctx.maxBytes = (std::max<size_t>(largest, 16) + 15) / 16 * 16;
  // The table's ranges (params.def) were checked by paramValidate; the
  // threshold comes from the policy and the thread count must fill warps.
  const int64_t maxBlocks = paramInt(ParamId::MaxBlocks);
  const int64_t threads = paramInt(ParamId::Threads);
  RCN_ARG_CHECK(ctx.maxBytes <= kMaxOneShotBytes, "the one-shot threshold of %zu bytes is over 1 GiB",
                ctx.maxBytes);
  RCN_ARG_CHECK(threads % 32 == 0, "ROCENANTE_THREADS=%lld must be a multiple of 32",
                static_cast<long long>(threads));
  ctx.maxBlocks = static_cast<int>(maxBlocks);
  ctx.threads = static_cast<int>(threads);
  ctx.timeoutMs = static_cast<uint64_t>(paramInt(ParamId::TimeoutMs));
  ctx.bootstrap = comm->bootstrap.get();
  ctx.topo = &topo;
  return createFastPath(ctx, kind, &comm->fast, why);
}

void fillInfo(rcnComm* comm, const std::string& reason) {
  rcnCommInfo& info = comm->info;
  info.rank = comm->rank;
  info.nranks = comm->nranks;
  info.cudaDev = comm->cudaDev;
  info.path = comm->fast ? comm->fast->path() : rcnPathNccl;
  snprintf(info.transport, sizeof info.transport, "%s",
           comm->fast ? comm->fast->transportName() : "nccl");
  // Without NCCL behind it (the host backend, ROCENANTE_NATIVE_NCCL=0) the
  // fast path takes what it can hold: the host backend's, every size.
  if (!comm->fast) info.maxBytes = 0;
  else if (!comm->nccl) info.maxBytes = comm->fast->maxBytes();
  else info.maxBytes = std::min(comm->fast->maxBytes(), comm->policy.oneShotMaxBytes);
  snprintf(info.reason, sizeof info.reason, "%s", reason.c_str());
}

// Where no NCCL stands behind the fast path (the host backend, or GPUs with
// ROCENANTE_NATIVE_NCCL=0), a call the fast path does not take cannot run at
// all, so creation fails with the reason (the same on every rank) instead of
// every all-reduce failing later: when there is no fast path, when the
// policy sends every call to NCCL (disable, force: nccl; checked after the
// startup vote, so that ranks whose policies differ hear that instead), and
// on GPUs when it routes no size to the fast path (the host backend's takes
// every size whatever the thresholds).
rcnResult_t requireSomePath(const rcnComm* comm, const std::string& reason) {
  if (comm->nccl) return rcnSuccess;
  const PolicyConfig& policy = comm->policy;
  const bool onGpu = comm->cudaDev >= 0;
  std::string why;
  if (!comm->fast) {
    why = "no fast path (" + reason + ")";
  } else if (policySendsAllToNccl(policy)) {
    why = "the fast path is unused: the policy sends every call to NCCL (" +
          std::string(policy.disabled ? "disable" : "force: nccl") + "; " + policy.source + ")";
  } else if (onGpu && std::max(policy.oneShotMaxBytes, policy.oneShotMaxBytesGraph) == 0) {
    why = "the fast path is unused: the policy routes no size to it (ROCENANTE_MAX_BYTES=0 or its thresholds; " +
          policy.source + ")";
  } else {
    return rcnSuccess;
  }
  const bool topology = !comm->fast && reason.rfind("topology: ", 0) == 0;
  const char* hint = onGpu ? " (ROCENANTE_NATIVE_NCCL=0; 1, the default, makes one)"
                     : topology ? "; ROCENANTE_TRANSPORT=host takes the host path anyway"
                                : "";
  RCN_WARN(RCN_LOG_INIT, "rank %d/%d: %s, and there is no NCCL to fall back to%s", comm->rank, comm->nranks,
           why.c_str(), hint);
  return rcnInvalidUsage;
}

rcnResult_t buildComm(rcnComm* comm, CommInitArgs& args) {
  RCN_CHECK(paramValidate());
  RCN_CHECK(pickDevice(args.cudaDev, args.existingNccl != nullptr, &comm->cudaDev));
  if (comm->cudaDev >= 0) {
    if (args.existingNccl) {
      comm->nccl = args.existingNccl;
      comm->ownsNccl = false;
    } else if (args.createNccl) {
      RCN_CHECK(createNcclComm(comm));
    }
  }
  CommTopo topo;
  RCN_CHECK(topoBuild(*comm->bootstrap, comm->cudaDev, &topo));
  comm->topoClass = topo.cls;
  comm->nnodes = topo.nnodes;
  std::string reason;
  bool settingsAgree = false;
  RCN_CHECK(compareSettings(comm, &settingsAgree, &reason));
  if (!settingsAgree || paramBool(ParamId::Disable)) {
    if (settingsAgree) reason = "disabled by ROCENANTE_DISABLE";
    RCN_CHECK(policyLoad(topo.cls, rcnPathNccl, comm->nranks, &comm->policy));
  } else {
    RCN_CHECK(buildFastPath(comm, topo, &reason));
  }
  if (comm->fast) {
    reason = std::string("fast path ") + comm->fast->transportName();
    RCN_CHECK(selfTestAndVote(comm, &reason));
  }
  // Only now: creation's waits must end within the bootstrap's bound, so
  // that a rank that fails its self-test leaves its peers an error in time.
  if (comm->fast) comm->fast->setPeerWaitMs(static_cast<uint64_t>(peerWaitMs(comm)));
  RCN_CHECK(requireSomePath(comm, reason));
  fillInfo(comm, reason);
  RCN_INFO(RCN_LOG_INIT, "comm %p rank %d/%d dev %d: %s path, up to %zu bytes (%s); a peer is waited for at "
           "most %lld ms", (void*)comm, comm->rank, comm->nranks, comm->cudaDev, comm->info.transport,
           comm->info.maxBytes, comm->info.reason, (long long)peerWaitMs(comm));
  return rcnSuccess;
}

}  // namespace

// NCCL waits for a late rank for as long as it takes, and frameworks bound
// that with their own watchdog, which aborts the communicator (and stops our
// waits); a 10 s bound under the shim would fail a barrier that one rank
// reaches after writing a checkpoint. Native-API callers keep the short default.
int64_t peerWaitMs(const rcnComm* comm) {
  const bool underShim = comm->nccl && !comm->ownsNccl;
  if (!underShim || paramIsSet(ParamId::TimeoutMs)) return paramInt(ParamId::TimeoutMs);
  return paramInt(ParamId::ShimTimeoutMs);
}

namespace {

// Destroyed and aborted communicators' husks, kept on purpose (see
// commDestroy): listed here so that they stay reachable, which is what
// LeakSanitizer checks, rather than lost.
void keepHusk(const rcnComm* comm) {
  static std::mutex mutex;
  static auto* husks = new std::vector<const rcnComm*>;
  std::lock_guard<std::mutex> lock(mutex);
  husks->push_back(comm);
}

}  // namespace

rcnResult_t commCreate(CommInitArgs args, rcnComm** out) {
  *out = nullptr;
  logVersionOnce();
  RelaxedCaptureScope relaxed;  // creation must not break a capture on another thread
  auto* comm = new rcnComm;
  comm->rank = args.rank;
  comm->nranks = args.nranks;
  // The bound on the waits of destroy and abort, for calls and the GPU. Its
  // range keeps nanosecond deadlines within 64 bits.
  comm->teardownMs = paramInt(ParamId::TimeoutMs);
  comm->pdl = paramBool(ParamId::Pdl);
  comm->bootstrap = std::move(args.bootstrap);
  rcnResult_t result = buildComm(comm, args);
  if (result != rcnSuccess) {
    commAbort(comm);
    delete comm;  // never handed out, so no husk is needed to catch later calls
    return result;
  }
  *out = comm;
  return rcnSuccess;
}

rcnResult_t commCreateRank(int rank, int nranks, std::unique_ptr<Bootstrap> bootstrap, rcnComm** out) {
  CommInitArgs args;
  args.rank = rank;
  args.nranks = nranks;
  args.bootstrap = std::move(bootstrap);
  return commCreate(std::move(args), out);
}

rcnResult_t commCheck(const rcnComm* comm, const char* caller) {
  RCN_ARG_CHECK(comm != nullptr, "%s: comm is NULL", caller);
  const uint64_t magic = comm->magic;  // once: a destroy may change it between two reads
  RCN_ARG_CHECK(magic != rcnComm::kDeadMagic, "%s: comm %p was already destroyed", caller, (const void*)comm);
  RCN_ARG_CHECK(magic == rcnComm::kLiveMagic, "%s: %p is not a rocenante communicator", caller,
                (const void*)comm);
  return rcnSuccess;
}

rcnResult_t commDestroy(rcnComm* comm) {
  RelaxedCaptureScope relaxed;  // its frees must not break a capture on another thread
  {
    std::lock_guard<std::mutex> lock(comm->teardown);
    if (comm->magic != rcnComm::kLiveMagic || comm->closing) {
      RCN_WARN(RCN_LOG_ALL, "rcnCommDestroy: comm %p is being (or was) destroyed or aborted by another thread",
               (void*)comm);
      return rcnInvalidUsage;
    }
    comm->closing = true;  // later calls are refused; this thread frees the comm
  }
  // Waited for outside the lock, so that an abort can still stop what is waited for.
  const int64_t limitMs = comm->teardownMs;
  const bool callsDone = commWaitForCalls(comm, deadlineAfterMs(limitMs + 1000));
  rcnResult_t result = rcnSuccess;
  // Our kernels run on the user's streams; they finish before their exchange
  // regions go away. Ours are bounded, but the wait is for the whole device,
  // and work that is not ours (another communicator's collective stuck on a
  // dead peer) may never end: after the bound the fast path is leaked, as
  // abort does, instead of hanging the destroy.
  cudaError_t deviceError = cudaSuccess;
  std::string notDrained;
  const Drained drained =
      comm->cudaDev < 0 ? Drained::Yes : drainDevice(comm->cudaDev, limitMs, &deviceError, &notDrained);
  std::lock_guard<std::mutex> lock(comm->teardown);
  if (deviceError != cudaSuccess) {
    RCN_WARN(RCN_LOG_COLL, "rcnCommDestroy: comm %p: device %d reports %s", (void*)comm, comm->cudaDev,
             cudaGetErrorString(deviceError));
    result = rcnUnhandledCudaError;
  }
  if (drained != Drained::Yes) {
    RCN_WARN(RCN_LOG_COLL, "rcnCommDestroy: comm %p: device %d: %s; its fast path is leaked", (void*)comm,
             comm->cudaDev, notDrained.c_str());
    // One of the kernels still running may be ours, waiting for a late peer:
    // it gives up now instead of spinning on the caller's stream until its
    // own bound. Where nothing could be waited for, ours may well finish:
    // they run on, over memory that is leaked, not freed.
    if (drained == Drained::TimedOut && comm->fast) comm->fast->abort();
    (void)comm->fast.release();
  }
  if (!callsDone) {
    // A call that did not return may be inside the fast path or NCCL: free neither under it.
    RCN_WARN(RCN_LOG_COLL, "rcnCommDestroy: comm %p still has a call running after %lld ms; its fast path "
             "and NCCL communicator are leaked", (void*)comm, (long long)limitMs);
    (void)comm->fast.release();
    comm->nccl = nullptr;
    result = rcnInvalidUsage;
  }
  comm->fast.reset();
  if (comm->nccl && comm->ownsNccl) {
    const NcclApi* nccl = nullptr;
    if (ncclApi(&nccl) == rcnSuccess && nccl->commDestroy(comm->nccl) != ncclSuccess)
      result = rcnInternalError;
  }
  comm->nccl = nullptr;
  comm->bootstrap.reset();
  comm->magic = rcnComm::kDeadMagic;
  // The husk stays allocated so a later call on the handle is caught by
  // commCheck instead of reading freed memory; it costs a few bytes per comm.
  keepHusk(comm);
  return result;
}

bool commWaitForCalls(rcnComm* comm, Deadline deadline) {
  return pollUntil(deadline, std::chrono::microseconds(200), [comm] { return comm->callsInFlight.load() == 0; });
}

namespace {
// commStop with comm->teardown held.
void stopLocked(rcnComm* comm) {
  comm->aborted = true;
  if (comm->fast) comm->fast->abort();
}
}  // namespace

void commStop(rcnComm* comm) {
  std::lock_guard<std::mutex> lock(comm->teardown);
  if (comm->magic == rcnComm::kLiveMagic) stopLocked(comm);
}

void commAbort(rcnComm* comm) {
  RelaxedCaptureScope relaxed;  // as destroy
  bool frees = false;
  {
    // Stop everything even when a destroy is under way (it may be waiting
    // for what this releases); free only if no one else is going to.
    std::lock_guard<std::mutex> lock(comm->teardown);
    if (comm->magic != rcnComm::kLiveMagic) return;  // already freed by another thread
    stopLocked(comm);
    if (comm->bootstrap) comm->bootstrap->abort();
    frees = !comm->closing;
    comm->closing = true;
  }
  // A call that passed its check just before may be on its way into NCCL,
  // which is about to free its communicator: wait, but briefly.
  commWaitForCalls(comm, deadlineAfterMs(kCallsIntoNcclMs));
  {
    std::lock_guard<std::mutex> lock(comm->teardown);
    if (comm->magic != rcnComm::kLiveMagic) return;
    if (comm->nccl && comm->ownsNccl) {
      const NcclApi* nccl = nullptr;
      if (ncclApi(&nccl) == rcnSuccess) nccl->commAbort(comm->nccl);
    }
    comm->nccl = nullptr;
  }
  if (!frees) return;  // the destroy or abort that got here first frees it
  // Our kernels saw the abort flag and exit promptly; one that is not ours
  // may never finish, so the wait is bounded like every wait for a peer.
  // One bound (ROCENANTE_TIMEOUT_MS) for both of abort's waits, outside the
  // lock like destroy's.
  const int64_t limitMs = comm->teardownMs;
  const Deadline deadline = deadlineAfterMs(limitMs);
  std::string notDrained;
  const bool deviceDrained =
      comm->cudaDev < 0 || drainDevice(comm->cudaDev, limitMs, nullptr, &notDrained) == Drained::Yes;
  const bool callsDone = commWaitForCalls(comm, deadline);
  std::lock_guard<std::mutex> lock(comm->teardown);
  if (!deviceDrained) {
    // Freeing device memory would wait for the device too, and a kernel of
    // ours may still be running: keep the memory.
    RCN_WARN(RCN_LOG_COLL, "rcnCommAbort: comm %p: device %d: %s; its fast path and bootstrap are leaked",
             (void*)comm, comm->cudaDev, notDrained.c_str());
    (void)comm->fast.release();
    (void)comm->bootstrap.release();
  }
  if (!callsDone) {
    // A call that did not return cannot have its path freed under it.
    RCN_WARN(RCN_LOG_COLL, "rcnCommAbort: comm %p still has a call running; its fast path is leaked",
             (void*)comm);
    (void)comm->fast.release();
  }
  comm->fast.reset();
  comm->bootstrap.reset();
  comm->magic = rcnComm::kDeadMagic;
  keepHusk(comm);
}

}  // namespace rcn
