// SPDX-License-Identifier: BSD-3-Clause
// The wire: how bytes reach a peer's exchange region. The one-shot protocol
// above it needs four things, shaped after RDMA so the verbs wire is the
// natural case and shm/tcp emulate it:
//   - one registered exchange region per rank, allocated by the wire
//     (shm segment, pinned pages, ibv_reg_mr'd memory) and known to peers by
//     a remote key exchanged over the bootstrap;
//   - put(peer, localOffset, remoteOffset, bytes): copy from this rank's
//     region into the peer's region (an RDMA WRITE);
//   - putFlag(peer, index, value): store a 32-bit flag in the peer's flag
//     array, landing after every earlier put to that peer (an inline RDMA
//     WRITE on the same ordered queue pair);
//   - progress()/error(): reap completions, detect dead peers.
// Puts read this rank's region asynchronously (RDMA): the source bytes must
// stay unchanged until the peer has seen the flag that follows them; the
// two-phase protocol guarantees that.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "core/fast_path.h"
#include "rocenante/rocenante.h"

namespace rcn {

class Bootstrap;

// The exchange region of every rank has the same shape: regionBytes in all,
// with flagCount 32-bit flags at flagOffset (4-byte aligned) somewhere inside.
// Puts may target any byte of the region; flags go through putFlag only.
struct WireLayout {
  size_t regionBytes = 0;
  size_t flagOffset = 0;
  size_t flagCount = 0;
};

// An exchange region the wire does not allocate but registers as it is:
// device memory, for GPUDirect RDMA. Only wires that can write device
// memory take one (verbs; cuda, its stand-in on one host).
struct DeviceRegion {
  uint8_t* ptr = nullptr;  // device pointer to the region (regionBytes long), a cudaMalloc base
  int cudaDev = -1;
  // A dma-buf of the region (verbs registers it with ibv_reg_dmabuf_mr), or
  // -1: ibv_reg_mr on the device pointer, through nvidia-peermem.
  int dmabufFd = -1;
};

class Wire {
 public:
  virtual ~Wire() = default;
  virtual const char* name() const = 0;  // "shm", "tcp", "verbs", "cuda"

  // This rank's exchange region (page aligned, layout().regionBytes() long);
  // a device pointer when the wire was given a DeviceRegion.
  virtual uint8_t* region() const = 0;
  const WireLayout& layout() const { return layout_; }
  // This rank's flag array, written by peers through putFlag.
  uint32_t* flags() const { return reinterpret_cast<uint32_t*>(region() + layout_.flagOffset); }

  virtual rcnResult_t put(int peer, size_t localOffset, size_t remoteOffset, size_t bytes) = 0;
  virtual rcnResult_t putFlag(int peer, size_t flagIndex, uint32_t value) = 0;
  // put() then putFlag() to one peer; a wire that can hands both to the NIC
  // at once (verbs: one chained post).
  virtual rcnResult_t putWithFlag(int peer, size_t localOffset, size_t remoteOffset, size_t bytes, size_t flagIndex,
                                  uint32_t value);
  // Puts reach the peer in time without this, and before any later flag of
  // this thread; LL sends no flag, so it calls this once after a block's last
  // put to bound how long weakly ordered stores may linger.
  virtual void flushPuts() {}
  // Reaps completions and checks peers; returns the wire's error, if any.
  virtual rcnResult_t progress() = 0;
  // rcnSuccess or the first error seen (a peer gone, a bad frame, a QP error).
  virtual rcnResult_t error(std::string* why) const = 0;
  // Stops background activity; later puts fail. Never waits for a peer to
  // answer (tcp: at most 100 ms a busy connection, while a failure another
  // thread found is told to the peers first).
  virtual void abort() = 0;
  // abort() for a failure of this rank's own (a timeout, a user's abort):
  // a wire that can carry text tells the peers `why` first, so they blame
  // its cause rather than this rank's closed connection.
  virtual void abortWith(const std::string& why) { (void)why, abort(); }
  // Tells peers this rank is leaving on purpose (so they do not see an error).
  virtual void close() {}
  // Whether `peer` has left on purpose (its close()): nothing more will
  // come from it, so a wait for it can end now.
  virtual bool peerLeft(int peer) const { (void)peer; return false; }
  // Whether put/putFlag may be called from several threads at once (to
  // different slots). progress() is always called from one thread only.
  virtual bool concurrentPuts() const { return false; }

 protected:
  // Whether puts must fail now: after abort() (and, for most wires, after
  // the first failure). Such a put returns rcnRemoteError without a log line:
  // the cause was logged where it happened.
  virtual bool stopped() const = 0;
  // rcnRemoteError once stopped(); else rcnInvalidArgument (logged, naming
  // the wire) unless `peer` is another rank and a put of `bytes` from `local`
  // to `remote` stays inside the region on both sides.
  rcnResult_t checkPut(int peer, size_t local, size_t remote, size_t bytes) const;
  // The same, unless `peer` is another rank and flagIndex one of its flags.
  rcnResult_t checkPutFlag(int peer, size_t flagIndex) const;
  rcnResult_t checkPeer(int peer) const;  // the two checks' first step
  // How long close() waits for its peers (their goodbyes, its last writes'
  // completions): the wire's timeout, but at most a second, since a clean
  // shutdown should not stall on a peer that is already gone.
  static Deadline closeDeadline(uint64_t timeoutMs) {
    return deadlineAfterMs(int64_t(std::min<uint64_t>(timeoutMs, 1000)));
  }

  WireLayout layout_;
  int rank_ = 0, nranks_ = 0;  // set by each wire's setup
};

// The first failure a wire saw. Any thread may record one (a completion,
// the receiver thread, a put); the first text wins and is logged, later ones
// are dropped, so error() names the cause rather than its echoes.
class WireFailure {
 public:
  // Records text when nothing was recorded before; true when this call did.
  // logged: the caller already warned with this text (it is not repeated).
  bool record(const std::string& text, bool logged = false);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // rcnSuccess, or rcnRemoteError with the recorded text in *why (if why).
  rcnResult_t get(std::string* why) const;

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  std::string text_;
};

// Every rank learns whether every rank succeeded at a setup step, so all
// fail together. Collective over bs. rcnSystemError when some rank failed:
// a failing rank then gets why = localWhy (its own reason), the others
// why = "<wire> wire: rank R failed to <step>".
rcnResult_t agreeOnStep(Bootstrap* bs, int rank, int nranks, bool ok, const std::string& localWhy,
                        const char* wire, const char* step, std::string* why);

// Which wire to build. Auto: shm when every rank is on this host, else verbs
// when every rank has an RDMA device (libibverbs loaded), else tcp. Cuda
// (device-memory regions on one host, written by the copy engine) stands in
// for GPUDirect RDMA where there is no NIC; only asked for by name.
enum class WireKind { Auto, Shm, Tcp, Verbs, Cuda };

// Parses ROCENANTE_WIRE's text ("auto", "shm", "tcp", "verbs", "cuda").
bool parseWireKind(const std::string& text, WireKind* out);

// The kind Auto stands for here (collective over ctx.bootstrap when Auto;
// the same answer on every rank). Other kinds come back unchanged.
rcnResult_t resolveWireKind(const FastPathContext& ctx, WireKind kind, WireKind* out);


// The kind ROCENANTE_WIRE asks for; rcnInvalidArgument naming the value when
// it is not one of them.
rcnResult_t wireKindFromParams(WireKind* out);

// Builds and connects this rank's wire: allocates (or, given a device
// region, takes) and registers the region, exchanges blobs over
// ctx.bootstrap, connects to every peer. Collective.
// On rcnSuccess *out may be null when the kind does not fit (why says so);
// the decision is the same on every rank.
rcnResult_t createWire(const FastPathContext& ctx, WireKind kind, const WireLayout& layout,
                       std::unique_ptr<Wire>* out, std::string* why,
                       const DeviceRegion* device = nullptr);

// Each wire's own constructor, used by createWire once the kind is chosen.
// All are collective over ctx.bootstrap.
rcnResult_t createShmWire(const FastPathContext& ctx, const WireLayout& layout,
                          std::unique_ptr<Wire>* out, std::string* why);
rcnResult_t createTcpWire(const FastPathContext& ctx, const WireLayout& layout,
                          std::unique_ptr<Wire>* out, std::string* why);
// Fails with rcnInvalidUsage and a reason when built without verbs.h or
// where libibverbs.so.1 does not load.
rcnResult_t createVerbsWire(const FastPathContext& ctx, const WireLayout& layout,
                            const DeviceRegion* device, std::unique_ptr<Wire>* out,
                            std::string* why);
rcnResult_t createCudaWire(const FastPathContext& ctx, const WireLayout& layout,
                           const DeviceRegion& device, std::unique_ptr<Wire>* out,
                           std::string* why);
// createVerbsWire with the flag protocol named ("imm" or "ordered", as
// ROCENANTE_IB_FLAGS) instead of read from the environment, for host-memory
// regions (rocenante-probe --rdma-check measures both); hca, when not
// empty, is the HCA list used instead of ROCENANTE_IB_HCA/NCCL_IB_HCA (the
// check measures each rail alone).
rcnResult_t createVerbsWireWithFlags(const FastPathContext& ctx, const WireLayout& layout, const std::string& flags,
                                     std::unique_ptr<Wire>* out, std::string* why, const std::string& hca = "");
// The most devices an HCA list opens at once (rails).
constexpr size_t kMaxVerbsRails = 4;
// True when this process can open at least one usable RDMA device/port.
bool verbsDeviceAvailable();
// The device, port and GID the verbs wire would use here, in words.
struct VerbsPortSummary {
  std::string device;
  int port = 0;
  int gidIndex = 0;
  std::string gid;        // "::ffff:10.0.0.1" style text
  int mtuBytes = 0;       // the port's active MTU
  std::string linkLayer;  // "Ethernet (RoCE)" or "InfiniBand"
};
// False with why when there is none (no libibverbs, no device, no usable port).
// preferred: as the wire's (verbsPreferredNic).
bool verbsPortSummary(VerbsPortSummary* out, std::string* why, const std::string& preferred = "");
// Every rail the verbs wire would open here (one per device of an HCA list,
// else the one port verbsPortSummary names); false with why when there is none.
bool verbsRailSummaries(std::vector<VerbsPortSummary>* out, std::string* why);
// The device the verbs wire tries first for this rank: its GPU's nearest RDMA
// NIC on PCIe in ctx.topo ("" without a topology or a GPU), as NCCL picks.
std::string verbsPreferredNic(const FastPathContext& ctx);
// True when the loaded libibverbs can register GPU memory through dma-buf
// (ibv_reg_dmabuf_mr, rdma-core 34 and later).
bool verbsDmabufRegistration();

}  // namespace rcn
