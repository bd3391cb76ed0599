// SPDX-License-Identifier: BSD-3-Clause
// The verbs wire: RoCE v2 (or InfiniBand) RC queue pairs to every peer. A put
// is an RDMA WRITE of the payload (inline when it fits the QP's inline room).
// A flag must not be seen before its payload, and verbs orders the execution
// of a QP's requests, not when their bytes become visible to the receiver's
// CPU or GPU (ibv_query_qp_data_in_order(3); ARM hosts such as GB10 say "not
// in order"). So by default (ROCENANTE_IB_FLAGS=imm) a flag is an RDMA WRITE
// WITH IMMEDIATE: it writes the value into a shadow array the consumers never
// read and carries the flag's index in its immediate; the NIC delivers the
// receive completion only once that write, and every earlier one on the QP,
// is in memory, and the receiving wire (progress()) then stores the value
// into the real flag. ROCENANTE_IB_FLAGS=ordered writes the flag directly,
// after the payload on the same QP, and is correct only where the host keeps
// the NIC's writes in order (an opt-in; docs/MULTINODE.md).
//
// A payload and its flag go to the NIC in one chained post. Every
// kSignalEvery-th request is signaled, and its completion frees the send
// slots of every request before it. Receives are empty and reposted as they
// complete. Control messages travel the same way: an immediate of kImmGoodbye
// (a clean close) or kImmAbort (this rank failed or was aborted), so a peer
// learns at once. A broken QP is learnt from error completions and from the
// device's asynchronous events (verbs_events.h), never by asking the QP. A
// peer process that ends without either message (killed, crashed) is learnt
// from the idle TCP connection the kernel closes for it (peer_link_watch.h),
// not at the retry timeout of a write to it.
//
// With an HCA list of several devices (a Spark's port is two PCIe
// functions) the wire opens a rail on each (verbs_rail.h) and connects each
// peer by one QP per rail, its "lanes" (lane 0 on a rail the peers are
// spread over). A put of ROCENANTE_IB_STRIPE_BYTES or more is split over
// the lanes. A flag then goes down every lane, each part's write with
// immediate behind that lane's payload part, and the receiver raises it only
// when every lane's immediate has come: each completion vouches only for
// its own QP's writes. The ordered protocol cannot vouch across QPs, so it
// keeps one lane per peer.
//
// The region is host memory mapped shared here, registered after
// ibv_fork_init, or a DeviceRegion (GPUDirect RDMA): GPU memory registered
// through its dma-buf (ibv_reg_dmabuf_mr) or, with nvidia-peermem, through
// ibv_reg_mr on the device pointer. The wire never touches its bytes, so a
// device region carries no flags (the proxy path uses staged LL lines there).
//
// No machine we test on has an RDMA NIC: tests drive this file through a
// mocked VerbsApi that behaves like a NIC (tests/verbs_mock.h), never
// through hardware.
#include "transport/wire/wire.h"

#if !ROCENANTE_HAVE_IBVERBS

namespace rcn {

bool verbsDmabufRegistration() { return false; }

rcnResult_t createVerbsWire(const FastPathContext&, const WireLayout&, const DeviceRegion*,
                            std::unique_ptr<Wire>* out, std::string* why) {
  out->reset();
  *why = "verbs wire: rocenante was built without libibverbs";
  return rcnInvalidUsage;
}

rcnResult_t createVerbsWireWithFlags(const FastPathContext& ctx, const WireLayout& layout, const std::string&,
                                     std::unique_ptr<Wire>* out, std::string* why, const std::string&) {
  return createVerbsWire(ctx, layout, nullptr, out, why);
}

}  // namespace rcn

#else

#include <arpa/inet.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/deadline.h"
#include "core/params.h"
#include "transport/wire/peer_link_watch.h"
#include "transport/wire/verbs_api.h"
#include "transport/wire/verbs_device.h"
#include "transport/wire/verbs_events.h"
#include "transport/wire/verbs_rail.h"
#include "transport/wire/verbs_select.h"

namespace rcn {

bool verbsDmabufRegistration() { return verbsApi().regDmabufMr != nullptr; }

namespace {

constexpr int kSendDepth = 128;    // send-queue entries per QP
constexpr int kSignalEvery = 32;   // one signaled request per this many
constexpr int kMaxInline = 64;     // inline bytes asked for; the QP's own cap is used
// Immediates above every flag index: control messages.
constexpr uint32_t kImmGoodbye = 0xffffffffu;
constexpr uint32_t kImmAbort = 0xfffffffeu;

enum class FlagMode : uint8_t { Imm = 1, Ordered = 2 };

constexpr int kMaxRails = int(kMaxVerbsRails);

// A rail as its peers need it (verbs_rail.h).
struct RailBlob {
  uint32_t rkey;
  uint32_t shadowRkey;
  uint8_t gid[16];
  uint16_t lid;
  uint8_t linkLayer;
  uint8_t mtu;
};

// What a rank tells every peer; followed by QpBlob[nranks] (its QP to each rank).
struct VerbsBlobHeader {
  uint64_t regionAddr;
  uint64_t shadowAddr;  // the flags' shadow array (imm mode writes there)
  uint32_t psn;
  uint8_t flagMode;
  uint8_t rails;
  uint8_t lanes;  // QPs this rank made per peer; a pair uses the smaller count
  uint8_t pad;
  int32_t ok;  // 0: this rank failed to set up; its why is local
  RailBlob rail[kMaxRails];
};

// A rank's QP of lane k to rank r is QpBlob[r * kMaxRails + k].
struct QpBlob {
  uint32_t qpn;
  uint32_t rail;  // which of this rank's rails the QP is on
};

const char* linkLayerName(uint8_t layer) {
  return layer == IBV_LINK_LAYER_ETHERNET     ? "Ethernet (RoCE)"
         : layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
                                              : "unknown";
}

// One anonymous shared mapping (shared, not private: a child's fork must not
// make the parent's registered pages copy-on-write), unmapped on destruction.
struct HostMapping {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  ~HostMapping() {
    if (base) munmap(base, bytes);
  }
  bool map(size_t length, std::string* why) {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      *why = errnoText("verbs wire: mmap of a registered region", errno);
      return false;
    }
    base = static_cast<uint8_t*>(p);
    bytes = length;
    return true;
  }
};

class VerbsWire final : public Wire {
 public:
  ~VerbsWire() override;
  const char* name() const override { return "verbs"; }
  const char* flagModeName() const { return flagMode_ == FlagMode::Imm ? "with immediate" : "ordered"; }
  size_t railCount() const { return rails_.size(); }
  uint8_t* region() const override { return base_; }

  // flags: "imm" or "ordered", or "" for ROCENANTE_IB_FLAGS; hca: an HCA
  // list, or "" for ROCENANTE_IB_HCA/NCCL_IB_HCA.
  rcnResult_t setup(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion* device,
                    const std::string& flags, const std::string& hca, std::string* why);
  rcnResult_t put(int peer, size_t localOffset, size_t remoteOffset, size_t bytes) override;
  rcnResult_t putFlag(int peer, size_t flagIndex, uint32_t value) override;
  rcnResult_t putWithFlag(int peer, size_t localOffset, size_t remoteOffset, size_t bytes, size_t flagIndex,
                          uint32_t value) override;
  rcnResult_t progress() override;
  rcnResult_t error(std::string* why) const override { return failure_.get(why); }
  void abort() override { abortWith(""); }
  void abortWith(const std::string& why) override;
  void close() override;
  bool peerLeft(int peer) const override {
    return peer >= 0 && peer < nranks_ && peers_[peer].left.load(std::memory_order_acquire);
  }

 private:
  // One QP to a peer.
  struct Lane {
    ibv_qp* qp = nullptr;
    int rail = 0;       // of this rank's rails, the one the QP is on
    uint32_t rkey = 0;  // the peer's registrations on the rail its end is on
    uint32_t shadowRkey = 0;
    std::atomic<uint64_t> posted{0};     // requests posted on this QP (changed under postMutex_)
    std::atomic<uint64_t> completed{0};  // requests known complete (through a signaled one)
    std::atomic<bool> goodbye{false};    // the peer's goodbye came on this QP, after all its writes here
  };
  struct Peer {
    Lane lane[kMaxRails];
    int lanes = 0;  // QPs created; after setup, those connected
    uint64_t remoteBase = 0;
    uint64_t shadowBase = 0;
    std::atomic<bool> left{false};  // its goodbye arrived on every lane
  };

  rcnResult_t readFlagMode(const std::string& flags, std::string* why);
  rcnResult_t createResources(const std::string& flags, std::string* why);
  rcnResult_t openRails(std::string* why);
  rcnResult_t createQueuePairs(std::string* why);
  rcnResult_t checkPeersMatch(const VerbsBlobHeader& theirs, const QpBlob& theirQp, int peer, std::string* why) const;
  rcnResult_t connectPeer(int peer, const VerbsBlobHeader& remote, const QpBlob* remoteQps, std::string* why);
  rcnResult_t connectQp(int peer, int lane, const VerbsBlobHeader& remote, const QpBlob& remoteQp, std::string* why);
  rcnResult_t startEvents(std::string* why);
  rcnResult_t postReceives(int peer, int lane, int count);
  void payloadRequest(int peer, int lane, size_t localOffset, size_t remoteOffset, size_t bytes, ibv_send_wr* wr,
                      ibv_sge* sge) const;
  rcnResult_t flagRequest(int peer, int lane, size_t flagIndex, const uint32_t* value, ibv_send_wr* wr, ibv_sge* sge);
  size_t stripePart(int peer, size_t bytes) const;
  rcnResult_t post(int peer, int lane, ibv_send_wr* wrs, int count);
  rcnResult_t postNow(int peer, int lane, ibv_send_wr* wrs, int count);
  bool hasRoom(int peer, int lane, int count) const;
  rcnResult_t waitForRoom(int peer, int lane, int count);
  std::vector<uint8_t> tellPeers(uint32_t imm, bool signaled);
  rcnResult_t reapSends(bool closing);
  rcnResult_t takeSendCompletions(const ibv_wc* wc, int n, bool closing);
  rcnResult_t reapReceives(bool closing);
  rcnResult_t takeReceiveCompletions(const ibv_wc* wc, int n, bool closing);
  rcnResult_t handleImmediate(int peer, int lane, uint32_t imm);
  bool closeFinished(const std::vector<uint8_t>& told);
  rcnResult_t fail(const std::string& text);
  bool stopped() const override { return aborted_.load(std::memory_order_acquire) || failure_.failed(); }
  size_t blobBytes() const { return sizeof(VerbsBlobHeader) + sizeof(QpBlob) * kMaxRails * nranks_; }
  std::string peerName(int peer) const { return "rank " + std::to_string(peer); }
  VerbsRail& railOf(int peer, int lane) const { return *rails_[peers_[peer].lane[lane].rail]; }

  uint64_t timeoutMs_ = 10000;
  std::string preferredNic_;  // the GPU's nearest NIC, tried first
  std::string hca_;           // the HCA list given to setup ("": the environment's)
  GidReach reach_;            // what this rank's GIDs must reach (empty without a topology)
  FlagMode flagMode_ = FlagMode::Imm;
  IbQpParams qpParams_;
  uint32_t psn_ = 0;
  std::vector<std::unique_ptr<VerbsRail> > rails_;
  uint8_t* base_ = nullptr;
  HostMapping hostRegion_;  // the region when it is host memory
  HostMapping shadow_;      // uint32_t[flagCount]: imm mode's flag values
  bool deviceRegion_ = false;
  int dmabufFd_ = -1;  // of a DeviceRegion; not ours to close
  int recvDepth_ = 0;
  uint32_t maxInline_ = UINT32_MAX;
  size_t stripeBytes_ = 0;  // the smallest put split over the lanes; 0: never
  int lanesWanted_ = 1;     // QPs per peer this rank makes
  std::vector<Peer> peers_;
  // Per flag: the lanes whose immediate for it has come (a striped flag is
  // raised by the last one).
  std::unique_ptr<std::atomic<uint8_t>[]> arrivals_;
  PeerLinkWatch links_;    // a peer process's end, seen at once
  std::mutex linksMutex_;  // progress() may run on several threads; the watch is one
  std::mutex postMutex_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> toldPeers_{false};
  WireFailure failure_;
};

// QPs before the rails they sit on (each rail closes its own device).
VerbsWire::~VerbsWire() {
  for (auto& rail : rails_) rail->events.stop();
  for (Peer& p : peers_)
    for (Lane& lane : p.lane)
      if (lane.qp) verbsApi().destroyQp(lane.qp);
  rails_.clear();
}

rcnResult_t VerbsWire::fail(const std::string& text) {
  failure_.record(text);
  return rcnRemoteError;
}

rcnResult_t VerbsWire::readFlagMode(const std::string& flags, std::string* why) {
  std::string mode = flags;
  if (mode.empty() && paramChoice(ParamId::IbFlags, &mode) != rcnSuccess) {
    *why = "verbs wire: ROCENANTE_IB_FLAGS must be imm or ordered";
    return rcnInvalidArgument;
  }
  if (mode != "imm" && mode != "ordered") {
    *why = "verbs wire: flag protocol '" + mode + "' is neither imm nor ordered";
    return rcnInvalidArgument;
  }
  flagMode_ = mode == "ordered" ? FlagMode::Ordered : FlagMode::Imm;
  return rcnSuccess;
}

// Rails, regions registered on each, one RC QP per peer.
rcnResult_t VerbsWire::createResources(const std::string& flags, std::string* why) {
  RCN_CHECK(readFlagMode(flags, why));
  if (!ibQpParamsFromEnv(&qpParams_, why)) {
    *why = "verbs wire: " + *why;
    return rcnInvalidArgument;
  }
  RCN_CHECK(openRails(why));
  stripeBytes_ = size_t(paramInt(ParamId::IbStripeBytes));
  lanesWanted_ = stripeBytes_ > 0 && flagMode_ == FlagMode::Imm ? int(rails_.size()) : 1;
  arrivals_ = std::make_unique<std::atomic<uint8_t>[]>(std::max<size_t>(layout_.flagCount, 1));
  return createQueuePairs(why);
}

// Every usable device an HCA list names (at most kMaxRails), else the one
// device the rules pick; the regions mapped once and registered on each.
rcnResult_t VerbsWire::openRails(std::string* why) {
  std::vector<VerbsPort> ports;
  VerbsPortQuery query;
  query.preferred = preferredNic_;
  query.hca = hca_;
  query.reach = &reach_;
  if (!openVerbsPorts(&ports, why, query)) return rcnInvalidUsage;
  verbsForkInit();  // before the first registration; a failure is logged and registration goes on
  VerbsRegions regions;
  if (!base_) {
    if (!hostRegion_.map(layout_.regionBytes, why)) return rcnSystemError;
    base_ = hostRegion_.base;
  }
  if (!shadow_.map(std::max<size_t>(layout_.flagCount, 1) * sizeof(uint32_t), why)) return rcnSystemError;
  regions.base = base_;
  regions.bytes = layout_.regionBytes;
  regions.device = deviceRegion_;
  regions.dmabufFd = dmabufFd_;
  // The imm protocol does not care in what order a payload lands (verbs_rail.cc).
  regions.relaxed = flagMode_ == FlagMode::Imm;
  regions.shadow = shadow_.base;
  regions.shadowBytes = shadow_.bytes;
  const int flagsPerPeer = int(layout_.flagCount / size_t(nranks_));
  recvDepth_ = std::max(16, 2 * flagsPerPeer + 8);
  for (const VerbsPort& port : ports) {
    rails_.push_back(std::make_unique<VerbsRail>());
    if (port.maxQpWr > 0) recvDepth_ = std::min(recvDepth_, port.maxQpWr);
  }
  // Each rail owns its port's context from here, so a failure closes every one.
  rcnResult_t res = rcnSuccess;
  for (size_t i = 0; i < ports.size(); ++i)
    if (res == rcnSuccess) res = rails_[i]->open(ports[i], regions, kSendDepth * nranks_, recvDepth_ * nranks_, why);
    else rails_[i]->port = ports[i];
  return res;
}

// A peer has at most its flags of two calls and a control message in flight;
// a receive short of that only delays it (RNR retries forever). Lane 0 of
// the peers is spread over the rails, lane k sits k rails further on.
rcnResult_t VerbsWire::createQueuePairs(std::string* why) {
  const VerbsApi& api = verbsApi();
  const int rails = int(rails_.size());
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    const int home = ((r - rank_ - 1 + nranks_) % nranks_) % rails;  // the next rank on rail 0
    peers_[r].lanes = lanesWanted_;
    for (int k = 0; k < lanesWanted_; ++k) {
      Lane& lane = peers_[r].lane[k];
      lane.rail = (home + k) % rails;
      VerbsRail& rail = *rails_[lane.rail];
      ibv_qp_init_attr init{};
      init.send_cq = rail.sendCq;
      init.recv_cq = rail.recvCq;
      init.qp_type = IBV_QPT_RC;
      init.sq_sig_all = 0;
      init.cap.max_send_wr = kSendDepth;
      init.cap.max_recv_wr = uint32_t(recvDepth_);
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      init.cap.max_inline_data = kMaxInline;
      lane.qp = api.createQp(rail.pd, &init);
      if (!lane.qp) {
        *why = errnoText("ibv_create_qp", errno) + " (QP to " + peerName(r) + ")";
        return rcnSystemError;
      }
      maxInline_ = std::min(maxInline_, init.cap.max_inline_data);  // what the provider granted
    }
  }
  return rcnSuccess;
}

// Every rank must speak the same flag protocol over the same link layer.
rcnResult_t VerbsWire::checkPeersMatch(const VerbsBlobHeader& theirs, const QpBlob& theirQp, int peer,
                                       std::string* why) const {
  const VerbsRail& mine = railOf(peer, 0);
  const uint8_t theirLayer = theirs.rail[theirQp.rail].linkLayer;
  if (theirLayer != mine.port.attr.link_layer) {
    *why = "verbs wire: " + peerName(peer) + "'s RDMA port is " + linkLayerName(theirLayer) + ", rank " +
           std::to_string(rank_) + "'s (" + mine.name() + ") is " + linkLayerName(mine.port.attr.link_layer) +
           ": they cannot connect (choose ports with ROCENANTE_IB_HCA)";
    return rcnInvalidUsage;
  }
  if (theirs.flagMode != uint8_t(flagMode_)) {
    *why = "verbs wire: ROCENANTE_IB_FLAGS differs between rank " + std::to_string(rank_) + " and " + peerName(peer) +
           ": every rank must set it alike";
    return rcnInvalidUsage;
  }
  return rcnSuccess;
}

// The pair's lanes (the smaller of the two ranks' counts) connected, lane k
// to the peer's lane k; a QP beyond them is destroyed unused.
rcnResult_t VerbsWire::connectPeer(int peer, const VerbsBlobHeader& remote, const QpBlob* remoteQps, std::string* why) {
  Peer& p = peers_[peer];
  const int lanes = std::min<int>(p.lanes, remote.lanes);
  if (lanes < 1 || lanes > kMaxRails) {
    *why = "verbs wire: " + peerName(peer) + " offered " + std::to_string(remote.lanes) + " queue pairs";
    return rcnInvalidUsage;
  }
  for (int k = lanes; k < p.lanes; ++k) {
    verbsApi().destroyQp(p.lane[k].qp);
    p.lane[k].qp = nullptr;
  }
  p.lanes = lanes;
  p.remoteBase = remote.regionAddr;
  p.shadowBase = remote.shadowAddr;
  for (int k = 0; k < lanes; ++k) {
    RCN_CHECK(connectQp(peer, k, remote, remoteQps[k], why));
    RCN_CHECK(postReceives(peer, k, recvDepth_));
  }
  return rcnSuccess;
}

// RESET -> INIT -> RTR (knowing the peer's QP number, PSN, GID/LID) -> RTS.
rcnResult_t VerbsWire::connectQp(int peer, int lane, const VerbsBlobHeader& remote, const QpBlob& remoteQp,
                                 std::string* why) {
  const VerbsApi& api = verbsApi();
  const VerbsRail& rail = railOf(peer, lane);
  if (remoteQp.rail >= remote.rails) {
    *why = "verbs wire: " + peerName(peer) + " sent a QP on rail " + std::to_string(remoteQp.rail) + " of " +
           std::to_string(remote.rails);
    return rcnInvalidUsage;
  }
  const RailBlob& theirs = remote.rail[remoteQp.rail];
  ibv_qp* qp = peers_[peer].lane[lane].qp;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = uint8_t(rail.port.port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (api.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    *why = errnoText("ibv_modify_qp(INIT)", errno) + " (QP to " + peerName(peer) + ")";
    return rcnSystemError;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = ibv_mtu(std::min<int>(rail.port.attr.active_mtu, theirs.mtu));
  a.dest_qp_num = remoteQp.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = uint8_t(rail.port.port);
  a.ah_attr.sl = uint8_t(qpParams_.serviceLevel);
  if (rail.port.attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, theirs.gid, 16);
    a.ah_attr.grh.sgid_index = uint8_t(rail.port.gidIndex);
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = uint8_t(qpParams_.trafficClass);
  } else {
    a.ah_attr.dlid = theirs.lid;
  }
  if (api.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    *why = errnoText("ibv_modify_qp(RTR)", errno) + " (QP to " + peerName(peer) + ")";
    return rcnSystemError;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = uint8_t(qpParams_.timeout);  // 4.096 us * 2^timeout per attempt
  a.retry_cnt = uint8_t(qpParams_.retryCnt);
  a.rnr_retry = 7;  // a receive not yet reposted: retry until it is
  a.sq_psn = psn_;
  a.max_rd_atomic = 1;
  if (api.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    *why = errnoText("ibv_modify_qp(RTS)", errno) + " (QP to " + peerName(peer) + ")";
    return rcnSystemError;
  }
  peers_[peer].lane[lane].rkey = theirs.rkey;
  peers_[peer].lane[lane].shadowRkey = theirs.shadowRkey;
  return rcnSuccess;
}

rcnResult_t VerbsWire::startEvents(std::string* why) {
  auto nameQp = [this](const ibv_qp* qp) {
    for (int r = 0; r < nranks_; ++r)
      for (const Lane& lane : peers_[r].lane)
        if (lane.qp == qp) return "the queue pair to " + peerName(r);
    return std::string("a queue pair");
  };
  for (auto& rail : rails_)
    RCN_CHECK(rail->events.start(
        rail->port.context, nameQp, [this](const std::string& text) { fail(text); }, why));
  return rcnSuccess;
}

rcnResult_t VerbsWire::setup(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion* device,
                             const std::string& flags, const std::string& hca, std::string* why) {
  hca_ = hca;
  if (device) {
    base_ = device->ptr;
    dmabufFd_ = device->dmabufFd;
    deviceRegion_ = true;
  }
  rank_ = ctx.rank;
  nranks_ = ctx.nranks;
  layout_ = layout;
  timeoutMs_ = ctx.timeoutMs ? ctx.timeoutMs : 10000;
  preferredNic_ = verbsPreferredNic(ctx);
  if (ctx.topo) reach_ = gidReachFromTopo(*ctx.topo, rank_);
  peers_ = std::vector<Peer>(size_t(nranks_));
  psn_ = uint32_t(std::chrono::steady_clock::now().time_since_epoch().count()) & 0xffffff;

  std::string localWhy;
  rcnResult_t local = createResources(flags, &localWhy);
  std::vector<uint8_t> blobs(blobBytes() * nranks_, 0);
  auto header = [&](int r) { return reinterpret_cast<VerbsBlobHeader*>(&blobs[blobBytes() * r]); };
  // qps(r) + peer * kMaxRails: rank r's lanes to peer.
  auto qps = [&](int r) { return reinterpret_cast<QpBlob*>(&blobs[blobBytes() * r] + sizeof(VerbsBlobHeader)); };
  VerbsBlobHeader* mine = header(rank_);
  mine->ok = local == rcnSuccess;
  if (local == rcnSuccess) {
    mine->regionAddr = reinterpret_cast<uint64_t>(base_);
    mine->shadowAddr = reinterpret_cast<uint64_t>(shadow_.base);
    mine->psn = psn_;
    mine->flagMode = uint8_t(flagMode_);
    mine->rails = uint8_t(rails_.size());
    mine->lanes = uint8_t(lanesWanted_);
    for (size_t i = 0; i < rails_.size(); ++i) {
      const VerbsRail& rail = *rails_[i];
      RailBlob& b = mine->rail[i];
      b.rkey = rail.mr->rkey;
      b.shadowRkey = rail.shadowMr->rkey;
      std::memcpy(b.gid, rail.gid.raw, 16);
      b.lid = rail.port.attr.lid;
      b.linkLayer = rail.port.attr.link_layer;
      b.mtu = uint8_t(rail.port.attr.active_mtu);
    }
    for (int r = 0; r < nranks_; ++r)
      for (int k = 0; k < peers_[r].lanes; ++k)
        qps(rank_)[r * kMaxRails + k] = QpBlob{peers_[r].lane[k].qp->qp_num, uint32_t(peers_[r].lane[k].rail)};
  }
  RCN_CHECK(ctx.bootstrap->allGather(blobs.data(), blobBytes()));
  for (int r = 0; r < nranks_; ++r) {
    if (header(r)->ok) continue;
    *why = local != rcnSuccess ? localWhy : "verbs wire: rank " + std::to_string(r) + " could not set up RDMA";
    return local == rcnInvalidUsage || local == rcnInvalidArgument ? local : rcnSystemError;
  }
  // Every rank sees every blob, so a mismatch fails every rank alike.
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_) RCN_CHECK(checkPeersMatch(*header(r), qps(r)[rank_ * kMaxRails], r, why));
  bool ok = true;
  for (int r = 0; r < nranks_ && ok; ++r) {
    if (r == rank_) continue;
    ok = connectPeer(r, *header(r), qps(r) + rank_ * kMaxRails, &localWhy) == rcnSuccess;
    if (!ok && failure_.failed()) failure_.get(&localWhy);
  }
  if (ok) ok = startEvents(&localWhy) == rcnSuccess;
  // Nobody posts before every QP is ready to receive.
  RCN_CHECK(agreeOnStep(ctx.bootstrap, rank_, nranks_, ok, localWhy, name(), "connect its queue pairs", why));
  ok = links_.connect(*ctx.bootstrap, timeoutMs_, name(), &localWhy) == rcnSuccess;
  return agreeOnStep(ctx.bootstrap, rank_, nranks_, ok, localWhy, name(), "open its exit watch", why);
}

// Empty receives: a write with immediate consumes one and carries no bytes
// into it. wr_id: the peer, and the lane above bit 32.
rcnResult_t VerbsWire::postReceives(int peer, int lane, int count) {
  std::vector<ibv_recv_wr> wrs(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    wrs[i] = ibv_recv_wr{};
    wrs[i].wr_id = uint64_t(peer) | (uint64_t(lane) << 32);
    wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  const int err = verbsApi().postRecv(peers_[peer].lane[lane].qp, wrs.data(), &bad);
  if (err != 0) return fail("verbs wire: ibv_post_recv for " + peerName(peer) + " failed: " + strerror(err));
  return rcnSuccess;
}

bool VerbsWire::hasRoom(int peer, int lane, int count) const {
  const Lane& l = peers_[peer].lane[lane];
  return l.posted + uint64_t(count) - l.completed.load(std::memory_order_acquire) < uint64_t(kSendDepth);
}

// Back-pressure: never more than kSendDepth - 1 requests outstanding on a QP.
rcnResult_t VerbsWire::waitForRoom(int peer, int lane, int count) {
  if (hasRoom(peer, lane, count)) return rcnSuccess;
  const Deadline deadline = deadlineAfterMs(int64_t(timeoutMs_));
  while (!hasRoom(peer, lane, count)) {
    if (stopped()) return rcnRemoteError;  // abort() must not wait out the timeout here
    RCN_CHECK(progress());
    if (expired(deadline))
      return fail("verbs wire: the send queue to " + peerName(peer) + " stayed full for " + std::to_string(timeoutMs_) +
                  " ms");
  }
  return rcnSuccess;
}

rcnResult_t VerbsWire::post(int peer, int lane, ibv_send_wr* wrs, int count) {
  RCN_CHECK(waitForRoom(peer, lane, count));
  return postNow(peer, lane, wrs, count);
}

// wr_id of a send: the peer above bit 48, the lane in bits 44..47, then the
// request's index on its QP.
constexpr int kLaneShift = 44;
constexpr uint64_t kIndexMask = (1ull << kLaneShift) - 1;

// Posts a chain of `count` requests (wrs[0..count) linked here) on a send
// queue known to have room; one request in kSignalEvery is signaled.
rcnResult_t VerbsWire::postNow(int peer, int lane, ibv_send_wr* wrs, int count) {
  Lane& l = peers_[peer].lane[lane];
  std::lock_guard<std::mutex> lock(postMutex_);
  for (int i = 0; i < count; ++i) {
    const uint64_t index = ++l.posted;
    if (index % kSignalEvery == 0) wrs[i].send_flags |= IBV_SEND_SIGNALED;
    wrs[i].wr_id = (uint64_t(peer) << 48) | (uint64_t(lane) << kLaneShift) | index;
    wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  const int err = verbsApi().postSend(l.qp, wrs, &bad);
  if (err != 0) return fail("verbs wire: ibv_post_send to " + peerName(peer) + " failed: " + strerror(err));
  return rcnSuccess;
}

void VerbsWire::payloadRequest(int peer, int lane, size_t localOffset, size_t remoteOffset, size_t bytes,
                               ibv_send_wr* wr, ibv_sge* sge) const {
  *sge = ibv_sge{reinterpret_cast<uint64_t>(base_ + localOffset), uint32_t(bytes), railOf(peer, lane).mr->lkey};
  *wr = ibv_send_wr{};
  wr->opcode = IBV_WR_RDMA_WRITE;
  // Inline: the bytes go with the request (read at post time), one DMA read fewer.
  if (bytes <= maxInline_ && !deviceRegion_) wr->send_flags = IBV_SEND_INLINE;
  wr->sg_list = sge;
  wr->num_sge = 1;
  wr->wr.rdma.remote_addr = peers_[peer].remoteBase + remoteOffset;
  wr->wr.rdma.rkey = peers_[peer].lane[lane].rkey;
}

// The flag's request: imm mode writes the value into the peer's shadow array
// with the index as immediate; ordered mode writes the flag itself. Inline:
// *value is copied at post time, so it may live on the stack.
rcnResult_t VerbsWire::flagRequest(int peer, int lane, size_t flagIndex, const uint32_t* value, ibv_send_wr* wr,
                                   ibv_sge* sge) {
  RCN_CHECK(checkPutFlag(peer, flagIndex));
  if (deviceRegion_) {
    RCN_WARN(RCN_LOG_TRANSPORT, "verbs wire: no flags into a GPU-memory region (staged LL lines carry their tags)");
    return rcnInvalidUsage;
  }
  *sge = ibv_sge{reinterpret_cast<uint64_t>(value), sizeof *value, 0};
  *wr = ibv_send_wr{};
  wr->send_flags = IBV_SEND_INLINE;
  wr->sg_list = sge;
  wr->num_sge = 1;
  const Peer& p = peers_[peer];
  if (flagMode_ == FlagMode::Imm) {
    wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr->imm_data = htonl(uint32_t(flagIndex));
    wr->wr.rdma.remote_addr = p.shadowBase + flagIndex * sizeof(uint32_t);
    wr->wr.rdma.rkey = p.lane[lane].shadowRkey;
  } else {
    wr->opcode = IBV_WR_RDMA_WRITE;
    wr->wr.rdma.remote_addr = p.remoteBase + layout_.flagOffset + flagIndex * sizeof(uint32_t);
    wr->wr.rdma.rkey = p.lane[lane].rkey;
  }
  return rcnSuccess;
}

// The bytes of each lane's part of a put: all of it (on lane 0) below the
// stripe size or with one lane, else an equal share rounded up to 64 bytes
// (whole LL lines), so the last lanes' parts may be short or empty.
size_t VerbsWire::stripePart(int peer, size_t bytes) const {
  const int lanes = peers_[peer].lanes;
  if (lanes <= 1 || stripeBytes_ == 0 || bytes < stripeBytes_) return bytes;
  return ((bytes + size_t(lanes) - 1) / size_t(lanes) + 63) & ~size_t(63);
}

rcnResult_t VerbsWire::put(int peer, size_t localOffset, size_t remoteOffset, size_t bytes) {
  RCN_CHECK(checkPut(peer, localOffset, remoteOffset, bytes));
  const size_t part = stripePart(peer, bytes);
  for (size_t done = 0, lane = 0; done < bytes; done += part, ++lane) {
    ibv_sge sge;
    ibv_send_wr wr;
    payloadRequest(peer, int(lane), localOffset + done, remoteOffset + done, std::min(part, bytes - done), &wr, &sge);
    RCN_CHECK(post(peer, int(lane), &wr, 1));
  }
  return rcnSuccess;
}

rcnResult_t VerbsWire::putFlag(int peer, size_t flagIndex, uint32_t value) {
  return putWithFlag(peer, 0, 0, 0, flagIndex, value);
}

// Each lane gets its part of the payload (maybe none) chained with the flag:
// the receiver raises the flag once every lane's immediate has come.
rcnResult_t VerbsWire::putWithFlag(int peer, size_t localOffset, size_t remoteOffset, size_t bytes, size_t flagIndex,
                                   uint32_t value) {
  RCN_CHECK(checkPut(peer, localOffset, remoteOffset, bytes));
  const size_t part = stripePart(peer, bytes);
  for (int lane = 0; lane < peers_[peer].lanes; ++lane) {
    ibv_sge sges[2];
    ibv_send_wr wrs[2];
    int count = 0;
    const size_t done = std::min(bytes, size_t(lane) * part);
    const size_t mine = std::min(part, bytes - done);
    if (mine)
      payloadRequest(peer, lane, localOffset + done, remoteOffset + done, mine, &wrs[count], &sges[count]), ++count;
    RCN_CHECK(flagRequest(peer, lane, flagIndex, &value, &wrs[count], &sges[count]));
    RCN_CHECK(post(peer, lane, wrs, count + 1));
  }
  return rcnSuccess;
}

// A zero-length write with immediate `imm` to every peer still there, where
// its send queue has room (never waits: abort() must return at once); which
// peers it went to. signaled: its completion confirms every earlier write to
// that peer.
std::vector<uint8_t> VerbsWire::tellPeers(uint32_t imm, bool signaled) {
  std::vector<uint8_t> told(size_t(nranks_), 0);  // per peer, a bit per lane
  for (int r = 0; r < nranks_; ++r) {
    for (int k = 0; k < peers_[r].lanes; ++k) {
      if (!peers_[r].lane[k].qp || peers_[r].left.load() || !hasRoom(r, k, 1)) continue;
      ibv_send_wr wr{};
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
      wr.imm_data = htonl(imm);
      wr.num_sge = 0;
      wr.wr.rdma.remote_addr = peers_[r].shadowBase;
      wr.wr.rdma.rkey = peers_[r].lane[k].shadowRkey;
      if (postNow(r, k, &wr, 1) == rcnSuccess) told[r] |= uint8_t(1u << k);  // a broken QP: the others still go
    }
  }
  return told;
}

// The peers hear of it at once (their wire fails naming this rank) instead
// of at their timeout.
void VerbsWire::abortWith(const std::string&) {
  if (!toldPeers_.exchange(true) && !aborted_.load()) tellPeers(kImmAbort, /*signaled=*/false);
  aborted_.store(true, std::memory_order_release);
}

// Every peer told goodbye has confirmed it, or left itself. A peer whose
// send queue was full got no goodbye: its last writes go unconfirmed.
bool VerbsWire::closeFinished(const std::vector<uint8_t>& told) {
  for (int r = 0; r < nranks_; ++r) {
    const Peer& p = peers_[r];
    if (p.left.load()) continue;
    for (int k = 0; k < p.lanes; ++k)
      if ((told[r] >> k & 1) && p.lane[k].completed.load() != p.lane[k].posted) return false;
  }
  return true;
}

// The last call's writes are unsignaled and may still be in flight: the
// QPs' destruction would drop them, and a peer still waiting for our flags
// would time out on a clean shutdown. A signaled goodbye per peer covers
// every request before it (RC completes in order) and tells the peer this
// rank left; wait (closeDeadline) until each completed or its peer left too
// (a peer that said goodbye may have destroyed its QP already: waiting for
// it would cost a retry timeout).
void VerbsWire::close() {
  if (stopped() || toldPeers_.exchange(true)) return;
  const std::vector<uint8_t> told = tellPeers(kImmGoodbye, /*signaled=*/true);
  (void)pollUntil(closeDeadline(timeoutMs_), std::chrono::microseconds(20), [&] {
    if (reapSends(/*closing=*/true) != rcnSuccess || reapReceives(/*closing=*/true) != rcnSuccess) return true;
    return closeFinished(told);
  });
}

// A peer's exit is judged after its goodbye had its chance to be reaped.
rcnResult_t VerbsWire::progress() {
  if (failure_.failed()) return rcnRemoteError;
  RCN_CHECK(reapSends(/*closing=*/false));
  RCN_CHECK(reapReceives(/*closing=*/false));
  std::unique_lock<std::mutex> lock(linksMutex_, std::try_to_lock);
  if (!lock.owns_lock()) return rcnSuccess;  // another thread is looking
  const std::string exited = links_.check([this](int peer) { return peerLeft(peer); });
  return exited.empty() ? rcnSuccess : fail(exited);
}

// Reaps finished sends on every rail. An error completion is the wire's
// failure, except while closing: a peer that closed first may have destroyed
// its QP, so our last write to it fails, and is then simply over.
rcnResult_t VerbsWire::reapSends(bool closing) {
  for (auto& rail : rails_) {
    ibv_wc wc[16];
    const int n = verbsApi().pollCq(rail->sendCq, 16, wc);
    if (n < 0) return closing ? rcnRemoteError : fail("verbs wire: ibv_poll_cq failed (" + rail->name() + ")");
    RCN_CHECK(takeSendCompletions(wc, n, closing));
  }
  return rcnSuccess;
}

rcnResult_t VerbsWire::takeSendCompletions(const ibv_wc* wc, int n, bool closing) {
  for (int i = 0; i < n; ++i) {
    const int peer = int(wc[i].wr_id >> 48);
    const int lane = int((wc[i].wr_id >> kLaneShift) & 0xf);
    const bool known = peer >= 0 && peer < nranks_ && lane < peers_[peer].lanes && peers_[peer].lane[lane].qp;
    Lane* l = known ? &peers_[peer].lane[lane] : nullptr;
    if (wc[i].status != IBV_WC_SUCCESS) {
      if (closing) {
        if (l) l->completed.store(l->posted);  // nothing more completes on that QP
        continue;
      }
      char text[200];
      std::snprintf(text, sizeof text,
                    "verbs wire: a write to rank %d completed with error '%s' (status %d, vendor error 0x%x)",
                    peer, verbsApi().wcStatusStr(wc[i].status), int(wc[i].status), wc[i].vendor_err);
      return fail(text);
    }
    // RC completes in order: this signaled request finished every earlier one.
    const uint64_t index = wc[i].wr_id & kIndexMask;
    if (l && index > l->completed.load()) l->completed.store(index);
  }
  return rcnSuccess;
}

// Reaps writes with immediate from peers on every rail: flags (imm mode)
// and control messages, reposting a receive for each.
rcnResult_t VerbsWire::reapReceives(bool closing) {
  for (auto& rail : rails_) {
    ibv_wc wc[16];
    const int n = verbsApi().pollCq(rail->recvCq, 16, wc);
    if (n < 0) return fail("verbs wire: ibv_poll_cq (receives) failed (" + rail->name() + ")");
    RCN_CHECK(takeReceiveCompletions(wc, n, closing));
  }
  return rcnSuccess;
}

// A flushed receive is an echo: its QP went to the error state, mostly
// because one of our writes on it failed. The NIC reports that write on the
// send CQ, which progress() may have polled just before the failure, so
// the send CQ is polled again to name the failed write rather than the flush
// (while closing, a failed write is over, as reapSends says, not a cause).
rcnResult_t VerbsWire::takeReceiveCompletions(const ibv_wc* wc, int n, bool closing) {
  for (int i = 0; i < n; ++i) {
    const int peer = int(wc[i].wr_id & 0xffffffffu);
    const int lane = int(wc[i].wr_id >> 32);
    if (peer < 0 || peer >= nranks_ || lane >= peers_[peer].lanes || !peers_[peer].lane[lane].qp)
      return fail("verbs wire: a receive completion of no peer");
    Lane& l = peers_[peer].lane[lane];
    if (wc[i].status != IBV_WC_SUCCESS && l.goodbye.load()) continue;        // the peer is gone from this lane
    if (wc[i].status == IBV_WC_WR_FLUSH_ERR) RCN_CHECK(reapSends(closing));  // the cause first
    if (wc[i].status != IBV_WC_SUCCESS)
      return fail("verbs wire: the queue pair to " + peerName(peer) + " failed: a receive completed with error '" +
                  verbsApi().wcStatusStr(wc[i].status) + "'");
    if (!(wc[i].wc_flags & IBV_WC_WITH_IMM))
      return fail("verbs wire: " + peerName(peer) + " sent a message without an immediate");
    RCN_CHECK(handleImmediate(peer, lane, ntohl(wc[i].imm_data)));
    if (!l.goodbye.load()) RCN_CHECK(postReceives(peer, lane, 1));
  }
  return rcnSuccess;
}

// A goodbye vouches only for its own lane's writes: the peer has left once
// every lane's has come.
rcnResult_t VerbsWire::handleImmediate(int peer, int lane, uint32_t imm) {
  Peer& p = peers_[peer];
  if (imm == kImmGoodbye) {
    p.lane[lane].goodbye.store(true);
    bool all = true;
    for (int k = 0; k < p.lanes; ++k) all = all && p.lane[k].goodbye.load();
    if (all) p.left.store(true, std::memory_order_release);
    return rcnSuccess;
  }
  if (imm == kImmAbort)
    return fail("verbs wire: " + peerName(peer) + " failed or aborted its communicator (it said so over the wire)");
  if (imm >= layout_.flagCount || flagMode_ != FlagMode::Imm || deviceRegion_)
    return fail("verbs wire: " + peerName(peer) + " sent an unexpected immediate " + std::to_string(imm));
  // The completion says the shadow word (and every earlier write on the QP)
  // is in memory; with several lanes, only for this lane's part. Once every
  // lane's has come, the consumers may see the flag. The count restarts
  // before the flag shows: its next use follows the consumers' reply.
  const int lanes = peers_[peer].lanes;
  if (lanes > 1) {
    if (arrivals_[imm].fetch_add(1, std::memory_order_acq_rel) + 1 < lanes) return rcnSuccess;
    arrivals_[imm].store(0, std::memory_order_relaxed);
  }
  const uint32_t* shadow = reinterpret_cast<const uint32_t*>(shadow_.base);
  __atomic_store_n(&flags()[imm], __atomic_load_n(&shadow[imm], __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
  return rcnSuccess;
}

}  // namespace

namespace {

rcnResult_t buildVerbsWire(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion* device,
                           const std::string& flags, const std::string& hca, std::unique_ptr<Wire>* out,
                           std::string* why) {
  out->reset();
  auto wire = std::make_unique<VerbsWire>();
  rcnResult_t res = wire->setup(ctx, layout, device, flags, hca, why);
  if (res != rcnSuccess) {
    RCN_WARN(RCN_LOG_TRANSPORT, "%s", why->c_str());
    return res;
  }
  RCN_INFO(RCN_LOG_TRANSPORT,
           "verbs wire: rank %d connected %d RC queue pairs over %zu rail(s) (region in %s, flags %s)", ctx.rank,
           ctx.nranks - 1, wire->railCount(),
           !device                 ? "host memory"
           : device->dmabufFd >= 0 ? "GPU memory, dma-buf"
                                   : "GPU memory, peermem",
           wire->flagModeName());
  *out = std::move(wire);
  return rcnSuccess;
}

}  // namespace

rcnResult_t createVerbsWire(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion* device,
                            std::unique_ptr<Wire>* out, std::string* why) {
  return buildVerbsWire(ctx, layout, device, "", "", out, why);
}

rcnResult_t createVerbsWireWithFlags(const FastPathContext& ctx, const WireLayout& layout, const std::string& flags,
                                     std::unique_ptr<Wire>* out, std::string* why, const std::string& hca) {
  return buildVerbsWire(ctx, layout, nullptr, flags, hca, out, why);
}

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
