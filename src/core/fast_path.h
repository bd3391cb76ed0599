// SPDX-License-Identifier: BSD-3-Clause
// The seam between the communicator and a transport: a built, connected fast
// path that runs one-shot all-reduces. p2p (src/transport/p2p), proxy
// (src/transport/proxy) and the host backend implement it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "core/policy.h"
#include "rocenante/rocenante.h"

namespace rcn {

struct ResidualNormCall;  // kernels/residual_norm.h

// Everything a transport may need to build itself, agreed on every rank.
struct FastPathContext {
  int rank = 0;
  int nranks = 0;
  int cudaDev = -1;                 // -1: host backend
  size_t maxBytes = 0;              // slot size: largest message taken
  int maxBlocks = 0;
  int threads = 0;
  uint64_t timeoutMs = 0;           // bound on every wait of creation, teardown and the wires; on
                                    // the kernels' waits for a peer until setPeerWaitMs
  class Bootstrap* bootstrap = nullptr;  // valid during creation only
  const struct CommTopo* topo = nullptr;  // the agreed topology, during creation (may be null)
};

class FastPath {
 public:
  virtual ~FastPath() = default;
  virtual rcnPath_t path() const = 0;
  virtual const char* transportName() const = 0;  // "p2p-ipc", "proxy-shm", ...
  // Largest message (bytes) this path takes.
  virtual size_t maxBytes() const = 0;
  // Whether (dtype, op) runs here; must be rank-invariant.
  virtual bool supports(rcnDataType_t dtype, rcnRedOp_t op) const { return true; }
  // Enqueues one all-reduce on the stream (device paths) or runs it (host path).
  // Arguments were checked by the caller; count * size <= maxBytes(). Once an
  // error is recorded (asyncError), every call returns it instead: a kernel
  // launched after a failure exits at once and leaves recv as it was, so
  // success would hand the caller stale data.
  rcnResult_t allReduce(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                        cudaStream_t stream);
  // Whether this path runs `coll` one-shot; rank-invariant. Every path runs
  // the all-reduce.
  virtual bool runs(Collective coll) const { return coll == Collective::AllReduce; }
  // The largest share of one rank (bytes) an all-gather or reduce-scatter
  // may have here: sendcount or recvcount times the element size.
  virtual size_t maxShareBytes() const { return 0; }
  // Enqueues one all-gather: rank r's sendCount elements land at element
  // r * sendCount of every rank's recv. Checked as allReduce is, and
  // sendCount * size <= maxShareBytes().
  rcnResult_t allGather(const void* send, void* recv, size_t sendCount, rcnDataType_t dtype, cudaStream_t stream);
  // Enqueues one reduce-scatter: recv gets block `rank` (recvCount elements)
  // of op over every rank's send, reduced in rank order.
  rcnResult_t reduceScatter(const void* send, void* recv, size_t recvCount, rcnDataType_t dtype, rcnRedOp_t op,
                            cudaStream_t stream);
  // Whether this path runs the all-reduce, residual add and RMSNorm of
  // `call` as one kernel (kernels/residual_norm.h); rank-invariant. Where it
  // does not, the caller runs allReduce and then the separate norm kernel.
  virtual bool fusesResidualNorm(const ResidualNormCall& call) const { return false; }
  // Enqueues that kernel (fusesResidualNorm said yes); refused as allReduce is
  // once an error is recorded.
  rcnResult_t allReduceResidualNorm(const ResidualNormCall& call, cudaStream_t stream);
  // rcnSuccess or the first error recorded by a kernel or proxy; `why` names the peer.
  virtual rcnResult_t asyncError(std::string* why) = 0;
  // Makes every pending wait of this path give up promptly. Never blocks.
  virtual void abort() = 0;
  // The bound on a later kernel's wait for a peer, set once creation (whose
  // self-test keeps FastPathContext::timeoutMs) is done. The host path's
  // waits keep the context's bound.
  virtual void setPeerWaitMs(uint64_t ms) { (void)ms; }
  // The device API's view (rocenante/device.cuh); false, with the reason in
  // *why, where this path has none.
  virtual bool deviceComm(rcnDeviceComm* out, std::string* why) const {
    *why = std::string("the device API needs the p2p path; this communicator's is ") + transportName();
    return false;
  }

 protected:
  // allReduce's work, on a path with no error recorded.
  virtual rcnResult_t enqueue(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                              cudaStream_t stream) = 0;
  // allGather's and reduceScatter's work, on a path whose runs() says so.
  virtual rcnResult_t enqueueAllGather(const void* send, void* recv, size_t sendCount, rcnDataType_t dtype,
                                       cudaStream_t stream);
  virtual rcnResult_t enqueueReduceScatter(const void* send, void* recv, size_t recvCount, rcnDataType_t dtype,
                                           rcnRedOp_t op, cudaStream_t stream);

  // allReduceResidualNorm's work, on a path with no error recorded.
  virtual rcnResult_t enqueueResidualNorm(const ResidualNormCall& call, cudaStream_t stream);

 private:
  // The recorded error, logged as the refusal of `what`; rcnSuccess if none.
  rcnResult_t refuseAfterFailure(const char* what);
};

}  // namespace rcn
