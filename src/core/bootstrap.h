// SPDX-License-Identifier: BSD-3-Clause
// The bootstrap: how ranks of one communicator find each other and exchange the
// small blobs each transport needs (addresses, IPC handles, remote keys).
// Three kinds exist behind one interface: TCP from a unique id (native API),
// in-process (rcnCommInitAll) and over an existing NCCL communicator (the shim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "rocenante/rocenante.h"

namespace rcn {

// The most ranks a communicator may have: far above any cluster, and small
// enough that per-rank tables (the bootstrap root's, a policy's max_ranks)
// cannot be made to fill memory by a bad argument or a stray message.
constexpr int kMaxCommRanks = 1 << 20;

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // data holds nranks blocks of `bytes`; this rank fills block rank(), and on
  // return every block holds that rank's contribution. Bounded in time.
  virtual rcnResult_t allGather(void* data, size_t bytes) = 0;
  // Makes every rank wait for every other. Bounded in time.
  virtual rcnResult_t barrier();
  // Unblocks pending and future exchanges with an error (used by abort).
  virtual void abort() {}
};

// What an rcnUniqueId holds: the root's socket address and a random secret
// every connection of the communicator proves it holds (core/auth.h). Fits
// in RCN_UNIQUE_ID_BYTES. Whoever has the id can join: pass it like a password.
struct BootstrapHandle {
  uint8_t secret[32];  // kIdSecretBytes
  uint8_t addr[64];  // sockaddr_in or sockaddr_in6
  uint32_t addrLen;
};
static_assert(sizeof(BootstrapHandle) <= RCN_UNIQUE_ID_BYTES, "handle must fit the unique id");

// ROCENANTE_BOOTSTRAP_TIMEOUT_MS, clamped to [1 ms, 1e9 ms]: the bound on
// every bootstrap wait.
int64_t bootstrapTimeoutMs();

// Opens the root's listening socket, starts the root thread that introduces
// the ranks to each other, and writes the handle into id.
rcnResult_t bootstrapGetUniqueId(rcnUniqueId* id);

// Joins the communicator described by id as `rank` of `nranks` over TCP.
// Fails with a clear error (an id the root does not know, root unreachable,
// a rank that never joins) within ROCENANTE_BOOTSTRAP_TIMEOUT_MS.
rcnResult_t bootstrapInitTcp(const rcnUniqueId& id, int rank, int nranks,
                             std::unique_ptr<Bootstrap>* out);

// A group of in-process ranks (one thread each) that exchange through memory.
class LocalBootstrapGroup;
std::shared_ptr<LocalBootstrapGroup> makeLocalBootstrapGroup(int nranks);
std::unique_ptr<Bootstrap> bootstrapInitLocal(std::shared_ptr<LocalBootstrapGroup> group, int rank);

}  // namespace rcn
