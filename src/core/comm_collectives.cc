// SPDX-License-Identifier: BSD-3-Clause
// Routing and dispatch of the collectives (all-reduce, all-gather,
// reduce-scatter): one function decides, for every caller (native API, NCCL
// shim), whether a call takes the fast path or NCCL; one runs it.
#include <cuda_runtime_api.h>

#include <cstring>
#include <functional>

#include "core/check.h"
#include "core/comm.h"
#include "core/dtype.h"
#include "core/nccl_lib.h"
#include "core/policy.h"

namespace rcn {
namespace {

// One call, as its collective sees it. count is the API's: the all-reduce's
// count, the all-gather's sendcount, the reduce-scatter's recvcount.
struct CollectiveArgs {
  Collective coll;
  const char* caller;  // "rcnAllGather", ... for messages
  size_t count;
  rcnDataType_t dtype;
  rcnRedOp_t op;
  cudaStream_t stream;
  const void* send;
  void* recv;
};

// The bytes the policy judges the call by (policy.h): the all-reduce's
// buffer, the whole output of an all-gather and input of a reduce-scatter.
size_t routedBytes(const rcnComm* comm, Collective coll, size_t count, rcnDataType_t dtype) {
  const size_t bytes = count * dtypeSize(dtype);
  return coll == Collective::AllReduce ? bytes : bytes * static_cast<size_t>(comm->nranks);
}

// Whether the fast path can hold the call at all (whatever the policy says).
bool fastPathHolds(const rcnComm* comm, Collective coll, size_t bytes, rcnDataType_t dtype, rcnRedOp_t op) {
  const FastPath* fast = comm->fast.get();
  if (!fast || !fast->runs(coll) || !fast->supports(dtype, op)) return false;
  if (coll == Collective::AllReduce) return bytes <= fast->maxBytes();
  return bytes / static_cast<size_t>(comm->nranks) <= fast->maxShareBytes();
}

// Without NCCL (the host backend, ROCENANTE_NATIVE_NCCL=0) the fast path
// must take the call; the error names what it cannot take.
rcnResult_t requireFastPath(const rcnComm* comm, const CollectiveArgs& a, size_t bytes) {
  RCN_ARG_CHECK(comm->fast, "%s: comm %p has neither a fast path nor NCCL", a.caller, (const void*)comm);
  const FastPath& fast = *comm->fast;
  RCN_ARG_CHECK(fast.runs(a.coll),
                "%s: the %s path has no one-shot %s, and comm %p has no NCCL to fall back to "
                "(ROCENANTE_NATIVE_NCCL=0)",
                a.caller, fast.transportName(), collectiveName(a.coll), (const void*)comm);
  RCN_ARG_CHECK(fast.supports(a.dtype, a.op),
                "%s: the %s path does not take %s %s, and comm %p has no NCCL to fall "
                "back to (ROCENANTE_NATIVE_NCCL=0)",
                a.caller, fast.transportName(), dtypeName(a.dtype), opName(a.op), (const void*)comm);
  const bool share = a.coll != Collective::AllReduce;
  const size_t limit = share ? fast.maxShareBytes() : fast.maxBytes();
  const size_t have = share ? bytes / static_cast<size_t>(comm->nranks) : bytes;
  RCN_ARG_CHECK(have <= limit,
                "%s: %zu bytes%s is past the %s path's %zu, and comm %p has no NCCL to fall back to "
                "(ROCENANTE_NATIVE_NCCL=0)",
                a.caller, have, share ? " a rank" : "", fast.transportName(), limit, (const void*)comm);
  return rcnSuccess;
}

// A communicator of one rank without NCCL: every collective of a single
// input is that input (any op), so a call the fast path cannot hold is a
// copy, as NCCL makes it for a communicator of one rank.
rcnResult_t copyAlone(const rcnComm* comm, const CollectiveArgs& a, size_t bytes) {
  RCN_TRACE_LOG(RCN_LOG_COLL, "%s %zu bytes, one rank -> copy", collectiveName(a.coll), bytes);
  if (a.send == a.recv) return rcnSuccess;
  if (comm->cudaDev < 0) {
    std::memmove(a.recv, a.send, bytes);
    return rcnSuccess;
  }
  RCN_CUDA_CHECK(cudaMemcpyAsync(a.recv, a.send, bytes, cudaMemcpyDeviceToDevice, a.stream));
  return rcnSuccess;
}

// The one dispatch: fast path or NCCL, each given as a call, for a call
// already admitted (CollectiveCall).
rcnResult_t routeCollective(rcnComm* comm, const CollectiveArgs& a, const std::function<rcnResult_t()>& onFastPath,
                            const std::function<rcnResult_t(const NcclApi*)>& onNccl) {
  const size_t bytes = routedBytes(comm, a.coll, a.count, a.dtype);
  if (!comm->nccl) {
    if (comm->nranks == 1 && !fastPathHolds(comm, a.coll, bytes, a.dtype, a.op)) return copyAlone(comm, a, bytes);
    RCN_CHECK(requireFastPath(comm, a, bytes));
    return onFastPath();
  }
  if (commTakesFastPath(comm, a.coll, bytes, a.dtype, a.op, a.stream)) {
    RCN_TRACE_LOG(RCN_LOG_COLL, "%s %zu bytes %s %s -> %s", collectiveName(a.coll), bytes, dtypeName(a.dtype),
                  opName(a.op), comm->fast->transportName());
    return onFastPath();
  }
  RCN_TRACE_LOG(RCN_LOG_COLL, "%s %zu bytes %s %s -> nccl", collectiveName(a.coll), bytes, dtypeName(a.dtype),
                opName(a.op));
  const NcclApi* nccl = nullptr;
  RCN_CHECK(ncclApi(&nccl));
  return onNccl(nccl);
}

rcnResult_t runCollective(rcnComm* comm, const CollectiveArgs& a, const std::function<rcnResult_t()>& onFastPath,
                          const std::function<rcnResult_t(const NcclApi*)>& onNccl) {
  CollectiveCall call(comm);
  RCN_CHECK(call.enter(a.caller));
  return routeCollective(comm, a, onFastPath, onNccl);
}

rcnResult_t ncclAllReduceOn(rcnComm* comm, const NcclApi* nccl, const void* send, void* recv, size_t count,
                            rcnDataType_t dtype, rcnRedOp_t op, cudaStream_t stream) {
  RCN_NCCL_CHECK(nccl, allReduce(send, recv, count, static_cast<ncclDataType_t>(dtype), static_cast<ncclRedOp_t>(op),
                                 comm->nccl, stream));
  return rcnSuccess;
}

}  // namespace

CollectiveCall::~CollectiveCall() {
  if (claimed_) comm_->inAllReduce.store(false, std::memory_order_release);
}

rcnResult_t CollectiveCall::enter(const char* caller) {
  if (!commUsable(comm_)) {
    RCN_WARN(RCN_LOG_COLL,
             "%s: comm %p was aborted or is being destroyed (or, under the shim, its NCCL "
             "communicator revoked)",
             caller, (void*)comm_);
    return rcnInvalidUsage;
  }
  // The fast path's call numbers and slots are one sequence per communicator:
  // two threads at once would mix their data and still report success.
  if (comm_->inAllReduce.exchange(true, std::memory_order_acquire)) {
    RCN_WARN(RCN_LOG_COLL,
             "%s: comm %p is in a collective on another thread: calls on one communicator "
             "must not overlap (one thread at a time, as with NCCL)",
             caller, (void*)comm_);
    return rcnInvalidUsage;
  }
  claimed_ = true;
  return rcnSuccess;
}

bool commTakesFastPath(const rcnComm* comm, Collective coll, size_t bytes, rcnDataType_t dtype, rcnRedOp_t op,
                       cudaStream_t stream) {
  CallDesc call;
  call.coll = coll;
  call.bytes = bytes;
  call.dtype = dtype;
  call.op = op;
  call.nranks = comm->nranks;
  call.nnodes = comm->nnodes;
  call.topo = comm->topoClass;
  call.transport = comm->fast ? comm->fast->path() : rcnPathNccl;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess)
    call.graphCapture = capture == cudaStreamCaptureStatusActive;
  const bool fast =
      policyRoute(call, comm->policy).route == Route::OneShot && fastPathHolds(comm, coll, bytes, dtype, op);
  // Under the shim, a suspend must keep the memory a captured graph points at.
  if (fast && call.graphCapture) comm->fastPathCaptured.store(true, std::memory_order_relaxed);
  return fast;
}

rcnResult_t commAllReduce(rcnComm* comm, const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                          cudaStream_t stream) {
  const CollectiveArgs a{Collective::AllReduce, "rcnAllReduce", count, dtype, op, stream, send, recv};
  return runCollective(
      comm, a, [&] { return comm->fast->allReduce(send, recv, count, dtype, op, stream); },
      [&](const NcclApi* nccl) { return ncclAllReduceOn(comm, nccl, send, recv, count, dtype, op, stream); });
}

rcnResult_t commRouteAllReduce(rcnComm* comm, const void* send, void* recv, size_t count, rcnDataType_t dtype,
                               rcnRedOp_t op, cudaStream_t stream) {
  const CollectiveArgs a{Collective::AllReduce, "rcnAllReduce", count, dtype, op, stream, send, recv};
  return routeCollective(
      comm, a, [&] { return comm->fast->allReduce(send, recv, count, dtype, op, stream); },
      [&](const NcclApi* nccl) { return ncclAllReduceOn(comm, nccl, send, recv, count, dtype, op, stream); });
}

rcnResult_t commAllGather(rcnComm* comm, const void* send, void* recv, size_t sendCount, rcnDataType_t dtype,
                          cudaStream_t stream) {
  const CollectiveArgs a{Collective::AllGather, "rcnAllGather", sendCount, dtype, rcnSum, stream, send, recv};
  return runCollective(
      comm, a, [&] { return comm->fast->allGather(send, recv, sendCount, dtype, stream); },
      [&](const NcclApi* nccl) {
        RCN_NCCL_CHECK(nccl, allGather(send, recv, sendCount, static_cast<ncclDataType_t>(dtype), comm->nccl, stream));
        return rcnSuccess;
      });
}

rcnResult_t commReduceScatter(rcnComm* comm, const void* send, void* recv, size_t recvCount, rcnDataType_t dtype,
                              rcnRedOp_t op, cudaStream_t stream) {
  const CollectiveArgs a{Collective::ReduceScatter, "rcnReduceScatter", recvCount, dtype, op, stream, send, recv};
  return runCollective(
      comm, a, [&] { return comm->fast->reduceScatter(send, recv, recvCount, dtype, op, stream); },
      [&](const NcclApi* nccl) {
        RCN_NCCL_CHECK(nccl, reduceScatter(send, recv, recvCount, static_cast<ncclDataType_t>(dtype),
                                           static_cast<ncclRedOp_t>(op), comm->nccl, stream));
        return rcnSuccess;
      });
}

}  // namespace rcn
