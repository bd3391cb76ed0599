// SPDX-License-Identifier: BSD-3-Clause
// The communicator: the one owner of per-communicator state. Created by the
// native API (rcnCommInitRank / rcnCommInitAll) and by the NCCL shim alike.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/bootstrap.h"
#include "core/deadline.h"
#include "core/fast_path.h"
#include "core/policy.h"
#include "rocenante/rocenante.h"

struct rcnComm {
  static constexpr uint64_t kLiveMagic = 0x726f63656e616e74ull;  // "rocenant"
  static constexpr uint64_t kDeadMagic = 0xdeaddeaddeaddeadull;

  std::atomic<uint64_t> magic{kLiveMagic};  // read by every API call, set dead under teardown
  int rank = 0;
  int nranks = 0;
  int cudaDev = -1;  // -1 on the host backend
  // The bound on destroy's and abort's waits (ROCENANTE_TIMEOUT_MS), read at
  // creation as every other parameter is: a later change of the environment
  // does not reach a communicator already made.
  int64_t teardownMs = 0;
  // ROCENANTE_PDL, read at creation likewise: the composed residual norm's launch.
  bool pdl = true;

  std::unique_ptr<rcn::Bootstrap> bootstrap;
  ncclComm_t nccl = nullptr;  // the fallback; null on the host backend and with ROCENANTE_NATIVE_NCCL=0
  bool ownsNccl = true;       // false when the shim built us over the user's comm

  std::unique_ptr<rcn::FastPath> fast;  // null: every call goes to NCCL
  rcn::PolicyConfig policy;             // agreed on every rank at init
  rcn::TopoClass topoClass = rcn::TopoClass::Unknown;  // from the topology probe
  int nnodes = 1;
  rcnCommInfo info{};                   // what rcnCommQuery returns

  std::atomic<bool> aborted{false};
  // Calls inside the fast path now: abort, which may come from another
  // thread to unblock one, must not free the path under it.
  std::atomic<int> callsInFlight{0};
  // An all-reduce is under way: calls on one communicator must not overlap
  // (as in NCCL); a second thread's is refused rather than interleaved.
  std::atomic<bool> inAllReduce{false};
  // A CUDA graph captured a fast-path kernel of this comm (commTakesFastPath
  // said yes under capture): the graph holds the path's buffer addresses, so
  // its memory must stay where it is while the comm lives (the shim's
  // ncclCommSuspend keeps it).
  mutable std::atomic<bool> fastPathCaptured{false};
  // Set by the first destroy or abort (under `teardown`): that one frees the
  // comm; calls that start after it are refused (checked after their
  // CommCallScope, so the teardown's wait for calls sees them or they see it).
  std::atomic<bool> closing{false};
  // Held while destroy or abort stops or frees the comm's parts, never while
  // they wait: either may race the other, or itself, from another thread, and
  // an abort must still be able to stop what a destroy waits for.
  std::mutex teardown;
};

namespace rcn {

// Counts a call that uses comm->fast for as long as it is in scope.
class CommCallScope {
 public:
  explicit CommCallScope(rcnComm* comm) : comm_(comm) { comm_->callsInFlight.fetch_add(1); }
  ~CommCallScope() { comm_->callsInFlight.fetch_sub(1); }
  CommCallScope(const CommCallScope&) = delete;
  CommCallScope& operator=(const CommCallScope&) = delete;

 private:
  rcnComm* comm_;
};

// How a communicator is being created.
struct CommInitArgs {
  int rank = 0;
  int nranks = 0;
  int cudaDev = -1;                       // -1: take the current device, or host backend
  std::unique_ptr<Bootstrap> bootstrap;   // already connected
  ncclComm_t existingNccl = nullptr;      // shim: build over this comm, do not own it
  bool createNccl = true;                 // native API: make our own NCCL comm
};

// Builds the communicator: agrees on config, creates (or adopts) the NCCL
// fallback, builds the fast path and runs the self-test and vote.
rcnResult_t commCreate(CommInitArgs args, rcnComm** out);

// The bound on the fast path's waits for a peer: ROCENANTE_TIMEOUT_MS, or,
// under the NCCL shim while that is unset, ROCENANTE_SHIM_TIMEOUT_MS.
int64_t peerWaitMs(const rcnComm* comm);

// commCreate with the defaults of a native-API rank (api.cc): one rank of a
// multi-process communicator, its bootstrap already connected.
rcnResult_t commCreateRank(int rank, int nranks, std::unique_ptr<Bootstrap> bootstrap, rcnComm** out);

// Waits for outstanding work (a call another thread is still in, bounded
// by ROCENANTE_TIMEOUT_MS; an abort may cut it short), frees everything.
// Safe on a partly built comm; rcnInvalidUsage if another thread destroyed
// or aborted it meanwhile.
rcnResult_t commDestroy(rcnComm* comm);

// Marks comm aborted (later calls fail) and makes the fast path's waits,
// host and kernel, give up. Frees nothing; any thread may call it (a comm
// already freed by destroy or abort is left alone).
void commStop(rcnComm* comm);

// How long an abort waits for calls already on their way into NCCL before
// aborting NCCL under them: they are back within microseconds unless NCCL
// blocks them, and then only NCCL's abort releases them.
constexpr int64_t kCallsIntoNcclMs = 100;

// Whether a call that has entered its CommCallScope may use comm's parts:
// not aborted, and no destroy or abort under way.
inline bool commUsable(const rcnComm* comm) { return !comm->aborted && !comm->closing; }

// Waits, until `deadline`, for no other thread to be inside a call on comm
// (CommCallScope). After commStop such a call gives up, so this returns
// promptly unless a call is blocked inside NCCL. False at the deadline.
bool commWaitForCalls(rcnComm* comm, Deadline deadline);

// Stops every pending wait and frees everything. Never blocks on a peer; its
// waits for the GPU and for calls in flight share one ROCENANTE_TIMEOUT_MS
// bound (past it, what they guard is leaked rather than freed).
void commAbort(rcnComm* comm);

// rcnInvalidArgument with a logged reason for a null, destroyed or foreign handle.
rcnResult_t commCheck(const rcnComm* comm, const char* caller);

// One collective call's entry (comm_collectives.cc): counts the call in
// flight (CommCallScope) and claims the communicator's one-call-at-a-time
// flag (inAllReduce, which every collective shares). enter() refuses, the
// reason logged under `caller`, a communicator aborted or being destroyed
// and a call that overlaps another thread's.
class CollectiveCall {
 public:
  explicit CollectiveCall(rcnComm* comm) : scope_(comm), comm_(comm) {}
  ~CollectiveCall();
  CollectiveCall(const CollectiveCall&) = delete;
  CollectiveCall& operator=(const CollectiveCall&) = delete;
  rcnResult_t enter(const char* caller);

 private:
  CommCallScope scope_;
  rcnComm* comm_;
  bool claimed_ = false;
};

// Whether a call of `coll` moving `bytes` (policy.h says which bytes) on
// `stream` takes the fast path (else NCCL): the policy's route, and the
// path's collectives, types and capacity. The same on every rank for the
// same call.
bool commTakesFastPath(const rcnComm* comm, Collective coll, size_t bytes, rcnDataType_t dtype, rcnRedOp_t op,
                       cudaStream_t stream);
// The all-reduce's, kept for its callers.
inline bool commTakesFastPath(const rcnComm* comm, size_t bytes, rcnDataType_t dtype, rcnRedOp_t op,
                              cudaStream_t stream) {
  return commTakesFastPath(comm, Collective::AllReduce, bytes, dtype, op, stream);
}

// The routing decision and dispatch of one call (arguments checked): the
// fast path where commTakesFastPath says so, else NCCL; without NCCL, the
// fast path or an error naming why it cannot take the call.
rcnResult_t commAllReduce(rcnComm* comm, const void* send, void* recv, size_t count,
                          rcnDataType_t dtype, rcnRedOp_t op, cudaStream_t stream);
rcnResult_t commAllGather(rcnComm* comm, const void* send, void* recv, size_t sendCount, rcnDataType_t dtype,
                          cudaStream_t stream);
rcnResult_t commReduceScatter(rcnComm* comm, const void* send, void* recv, size_t recvCount, rcnDataType_t dtype,
                              rcnRedOp_t op, cudaStream_t stream);

// commAllReduce's routing and launch, for a call already admitted by a
// CollectiveCall (an all-reduce that is part of a larger call).
rcnResult_t commRouteAllReduce(rcnComm* comm, const void* send, void* recv, size_t count, rcnDataType_t dtype,
                               rcnRedOp_t op, cudaStream_t stream);

}  // namespace rcn
