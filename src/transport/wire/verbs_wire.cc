// The verbs wire: RoCE v2 (or InfiniBand) RC queue pairs to every peer. A put
// is an unsignaled RDMA WRITE of the payload; a flag is a small inline RDMA
// WRITE on the same QP, which RC executes after the payload. Every
// kSignalEvery-th request is signaled, and its completion (polled in
// progress()) frees the send-queue slots of every request before it. The
// region is registered without relaxed ordering, so the payload lands in
// memory before the flag. The region is either host memory the wire maps
// itself or a DeviceRegion (GPUDirect RDMA): GPU memory registered through
// its dma-buf (ibv_reg_dmabuf_mr) or, with nvidia-peermem, through
// ibv_reg_mr on the device pointer. The wire never touches the region's bytes.
//
// No machine we test on has an RDMA NIC: tests drive this file through a
// mocked VerbsApi (tests/test_verbs_wire.cc), never through hardware.
#include "transport/wire/wire.h"

#if !ROCENANTE_HAVE_IBVERBS

namespace rcn {

bool verbsDeviceAvailable() { return false; }
bool verbsDmabufRegistration() { return false; }

rcnResult_t createVerbsWire(const FastPathContext&, const WireLayout&, const DeviceRegion*,
                            std::unique_ptr<Wire>* out, std::string* why) {
  out->reset();
  *why = "verbs wire: rocenante was built without libibverbs";
  return rcnInvalidUsage;
}

}  // namespace rcn

#else

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/deadline.h"
#include "transport/wire/verbs_api.h"
#include "transport/wire/verbs_select.h"

namespace rcn {

namespace {

std::string gSysfsRoot = "/sys/class/infiniband";

}  // namespace

bool verbsDmabufRegistration() { return verbsApi().regDmabufMr != nullptr; }
void setVerbsSysfsRootForTest(const char* root) {
  gSysfsRoot = root ? root : "/sys/class/infiniband";
}

// ---- device, port and GID ------------------------------------------------------

namespace {

constexpr int kSendDepth = 128;    // send-queue entries per QP
constexpr int kSignalEvery = 32;   // one signaled request per this many
constexpr int kMaxInline = 64;

struct VerbsPort {
  ibv_context* context = nullptr;
  std::string device;
  int port = 0;
  ibv_port_attr attr{};
};

// Opens the first device:port that the HCA filter accepts and that is ACTIVE.
bool openFirstPort(VerbsPort* out, std::string* why) {
  if (!verbsApiUsable(why)) {
    *why = "verbs wire: " + *why;
    return false;
  }
  const VerbsApi& api = verbsApi();
  std::string spec = hcaSpecFromEnv();
  HcaFilter filter = parseHcaFilter(spec);
  int count = 0;
  ibv_device** list = api.getDeviceList(&count);
  if (!list || count == 0) {
    if (list) api.freeDeviceList(list);
    *why = "verbs wire: no RDMA device";
    return false;
  }
  bool found = false;
  for (int d = 0; d < count && !found; ++d) {
    std::string name = api.getDeviceName(list[d]);
    ibv_context* context = api.openDevice(list[d]);
    if (!context) continue;
    ibv_device_attr devAttr{};
    int ports = api.queryDevice(context, &devAttr) == 0 ? devAttr.phys_port_cnt : 0;
    for (int p = 1; p <= ports && !found; ++p) {
      ibv_port_attr attr{};
      if (!hcaFilterAccepts(filter, name, p) || api.queryPort(context, uint8_t(p), &attr) != 0 ||
          attr.state != IBV_PORT_ACTIVE)
        continue;
      out->context = context;
      out->device = name;
      out->port = p;
      out->attr = attr;
      found = true;
    }
    if (!found) api.closeDevice(context);
  }
  api.freeDeviceList(list);
  if (!found)
    *why = "verbs wire: no active RDMA port" +
           (spec.empty() ? std::string() : " matching ROCENANTE_IB_HCA/NCCL_IB_HCA='" + spec + "'");
  return found;
}

}  // namespace

bool verbsDeviceAvailable() {
  static const bool available = [] {
    VerbsPort port;
    std::string why;
    if (!openFirstPort(&port, &why)) return false;
    verbsApi().closeDevice(port.context);
    return true;
  }();
  return available;
}

// ---- the wire ------------------------------------------------------------------

namespace {

// What a rank tells every peer; followed by qpn[nranks] (its QP to each rank).
struct VerbsBlobHeader {
  uint64_t regionAddr;
  uint32_t rkey;
  uint32_t psn;
  uint8_t gid[16];
  uint16_t lid;
  uint8_t linkLayer;
  uint8_t mtu;
  int32_t ok;  // 0: this rank failed to set up; its why is local
};

class VerbsWire final : public Wire {
 public:
  ~VerbsWire() override;
  const char* name() const override { return "verbs"; }
  uint8_t* region() const override { return base_; }

  rcnResult_t setup(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion* device,
                    std::string* why);
  rcnResult_t put(int peer, size_t localOffset, size_t remoteOffset, size_t bytes) override;
  rcnResult_t putFlag(int peer, size_t flagIndex, uint32_t value) override;
  rcnResult_t progress() override;
  rcnResult_t error(std::string* why) const override { return failure_.get(why); }
  void abort() override { aborted_.store(true, std::memory_order_release); }
  void close() override;

 private:
  struct Peer {
    ibv_qp* qp = nullptr;
    uint64_t remoteBase = 0;
    uint32_t rkey = 0;
    uint64_t posted = 0;     // requests posted on this QP
    uint64_t completed = 0;  // requests known complete (through a signaled one)
  };

  rcnResult_t createResources(std::string* why);
  rcnResult_t registerRegion(std::string* why);
  rcnResult_t connectQp(int peer, const VerbsBlobHeader& remote, uint32_t remoteQpn, std::string* why);
  rcnResult_t post(int peer, ibv_send_wr* wr);
  rcnResult_t postNow(int peer, ibv_send_wr* wr);
  rcnResult_t waitForSendSlot(int peer);
  rcnResult_t reap(bool closing);
  rcnResult_t checkQpStates();
  rcnResult_t fail(const std::string& text);
  bool stopped() const override { return aborted_.load(std::memory_order_acquire) || failure_.failed(); }
  size_t blobBytes() const { return sizeof(VerbsBlobHeader) + sizeof(uint32_t) * nranks_; }

  uint64_t timeoutMs_ = 10000;
  int gidIndex_ = 0;
  ibv_gid gid_{};
  uint32_t psn_ = 0;
  VerbsPort port_;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  uint8_t* base_ = nullptr;
  bool ownsRegion_ = false;  // mapped here (host memory), not a DeviceRegion
  int dmabufFd_ = -1;        // of a DeviceRegion; not ours to close
  std::vector<Peer> peers_;
  std::chrono::steady_clock::time_point lastQpCheck_{};
  std::atomic<bool> aborted_{false};
  WireFailure failure_;
};

VerbsWire::~VerbsWire() {
  const VerbsApi& api = verbsApi();
  for (Peer& p : peers_)
    if (p.qp) api.destroyQp(p.qp);
  if (cq_) api.destroyCq(cq_);
  if (mr_) api.deregMr(mr_);
  if (pd_) api.deallocPd(pd_);
  if (port_.context) api.closeDevice(port_.context);
  if (base_ && ownsRegion_) munmap(base_, layout_.regionBytes);
}

rcnResult_t VerbsWire::fail(const std::string& text) {
  failure_.record(text);
  return rcnRemoteError;
}

// Device, GID, protection domain, registered region, one CQ, one RC QP per peer.
rcnResult_t VerbsWire::createResources(std::string* why) {
  const VerbsApi& api = verbsApi();
  if (!openFirstPort(&port_, why)) return rcnInvalidUsage;
  gidIndex_ = gidIndexFromEnv();
  bool roce = port_.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  if (gidIndex_ < 0) gidIndex_ = roce ? findRoceV2Ipv4Gid(gSysfsRoot, port_.device, port_.port, why) : 0;
  if (gidIndex_ < 0) return rcnInvalidUsage;
  if (api.queryGid(port_.context, uint8_t(port_.port), gidIndex_, &gid_) != 0) {
    *why = errnoText("ibv_query_gid", errno);
    return rcnSystemError;
  }
  pd_ = api.allocPd(port_.context);
  if (!pd_) {
    *why = errnoText("ibv_alloc_pd", errno);
    return rcnSystemError;
  }
  RCN_CHECK(registerRegion(why));
  cq_ = api.createCq(port_.context, kSendDepth * nranks_, nullptr, nullptr, 0);
  if (!cq_) {
    *why = errnoText("ibv_create_cq", errno);
    return rcnSystemError;
  }
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    ibv_qp_init_attr init{};
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = kSendDepth;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = kMaxInline;
    peers_[r].qp = api.createQp(pd_, &init);
    if (!peers_[r].qp) {
      *why = errnoText("ibv_create_qp", errno) + " (QP to rank " + std::to_string(r) + ")";
      return rcnSystemError;
    }
  }
  return rcnSuccess;
}

// Host memory mapped here, or the given device memory as it is.
rcnResult_t VerbsWire::registerRegion(std::string* why) {
  const VerbsApi& api = verbsApi();
  // No IBV_ACCESS_RELAXED_ORDERING: the flag must land after the payload.
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  const char* what;
  if (!base_) {
    void* base = mmap(nullptr, layout_.regionBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      *why = errnoText("mmap of the exchange region", errno);
      return rcnSystemError;
    }
    base_ = static_cast<uint8_t*>(base);
    ownsRegion_ = true;
    mr_ = api.regMr(pd_, base_, layout_.regionBytes, access);
    what = "ibv_reg_mr";
  } else if (dmabufFd_ >= 0) {
    if (!api.regDmabufMr) {
      *why = "verbs wire: this build's rdma-core cannot register a dma-buf (ibv_reg_dmabuf_mr)";
      return rcnInvalidUsage;
    }
    mr_ = api.regDmabufMr(pd_, 0, layout_.regionBytes, reinterpret_cast<uint64_t>(base_), dmabufFd_, access);
    what = "ibv_reg_dmabuf_mr of the GPU-memory region";
  } else {
    mr_ = api.regMr(pd_, base_, layout_.regionBytes, access);
    what = "ibv_reg_mr of the GPU-memory region (is nvidia-peermem loaded?)";
  }
  if (mr_) return rcnSuccess;
  *why = errnoText(what, errno);
  return rcnSystemError;
}

// RESET -> INIT -> RTR (knowing the peer's QP number, PSN, GID/LID) -> RTS.
rcnResult_t VerbsWire::connectQp(int peer, const VerbsBlobHeader& remote, uint32_t remoteQpn,
                                 std::string* why) {
  const VerbsApi& api = verbsApi();
  ibv_qp* qp = peers_[peer].qp;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = uint8_t(port_.port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (api.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    *why = errnoText("ibv_modify_qp(INIT)", errno) + " (QP to rank " + std::to_string(peer) + ")";
    return rcnSystemError;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = ibv_mtu(std::min<int>(port_.attr.active_mtu, remote.mtu));
  a.dest_qp_num = remoteQpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = uint8_t(port_.port);
  if (port_.attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, 16);
    a.ah_attr.grh.sgid_index = uint8_t(gidIndex_);
    a.ah_attr.grh.hop_limit = 255;
  } else {
    a.ah_attr.dlid = remote.lid;
  }
  if (api.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    *why = errnoText("ibv_modify_qp(RTR)", errno) + " (QP to rank " + std::to_string(peer) + ")";
    return rcnSystemError;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;  // 4.096 us * 2^14 = 67 ms per attempt
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = psn_;
  a.max_rd_atomic = 1;
  if (api.modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    *why = errnoText("ibv_modify_qp(RTS)", errno) + " (QP to rank " + std::to_string(peer) + ")";
    return rcnSystemError;
  }
  peers_[peer].remoteBase = remote.regionAddr;
  peers_[peer].rkey = remote.rkey;
  return rcnSuccess;
}

rcnResult_t VerbsWire::setup(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion* device,
                             std::string* why) {
  if (device) {
    base_ = device->ptr;
    dmabufFd_ = device->dmabufFd;
  }
  rank_ = ctx.rank;
  nranks_ = ctx.nranks;
  layout_ = layout;
  timeoutMs_ = ctx.timeoutMs ? ctx.timeoutMs : 10000;
  peers_.assign(nranks_, Peer{});
  psn_ = uint32_t(std::chrono::steady_clock::now().time_since_epoch().count()) & 0xffffff;

  std::string localWhy;
  rcnResult_t local = createResources(&localWhy);
  std::vector<uint8_t> blobs(blobBytes() * nranks_, 0);
  auto header = [&](int r) { return reinterpret_cast<VerbsBlobHeader*>(&blobs[blobBytes() * r]); };
  auto qpns = [&](int r) { return reinterpret_cast<uint32_t*>(&blobs[blobBytes() * r] + sizeof(VerbsBlobHeader)); };
  VerbsBlobHeader* mine = header(rank_);
  mine->ok = local == rcnSuccess;
  if (local == rcnSuccess) {
    mine->regionAddr = reinterpret_cast<uint64_t>(base_);
    mine->rkey = mr_->rkey;
    mine->psn = psn_;
    std::memcpy(mine->gid, gid_.raw, 16);
    mine->lid = port_.attr.lid;
    mine->linkLayer = port_.attr.link_layer;
    mine->mtu = uint8_t(port_.attr.active_mtu);
    for (int r = 0; r < nranks_; ++r) qpns(rank_)[r] = peers_[r].qp ? peers_[r].qp->qp_num : 0;
  }
  RCN_CHECK(ctx.bootstrap->allGather(blobs.data(), blobBytes()));
  for (int r = 0; r < nranks_; ++r) {
    if (header(r)->ok) continue;
    *why = local != rcnSuccess ? localWhy : "verbs wire: rank " + std::to_string(r) + " could not set up RDMA";
    return local == rcnInvalidUsage ? rcnInvalidUsage : rcnSystemError;
  }
  bool ok = true;
  for (int r = 0; r < nranks_ && ok; ++r)
    if (r != rank_) ok = connectQp(r, *header(r), qpns(r)[rank_], &localWhy) == rcnSuccess;
  // Nobody posts before every QP is ready to receive.
  return agreeOnStep(ctx.bootstrap, rank_, nranks_, ok, localWhy, name(), "connect its queue pairs", why);
}

// Back-pressure: never more than kSendDepth requests outstanding on a QP.
rcnResult_t VerbsWire::waitForSendSlot(int peer) {
  Peer& p = peers_[peer];
  if (p.posted - p.completed < uint64_t(kSendDepth - 1)) return rcnSuccess;
  const Deadline deadline = deadlineAfterMs(int64_t(timeoutMs_));
  while (p.posted - p.completed >= uint64_t(kSendDepth - 1)) {
    if (stopped()) return rcnRemoteError;  // abort() must not wait out the timeout here
    RCN_CHECK(progress());
    if (expired(deadline))
      return fail("verbs wire: the send queue to rank " + std::to_string(peer) + " stayed full for " +
                  std::to_string(timeoutMs_) + " ms");
  }
  return rcnSuccess;
}

rcnResult_t VerbsWire::post(int peer, ibv_send_wr* wr) {
  RCN_CHECK(waitForSendSlot(peer));
  return postNow(peer, wr);
}

// Posts on a send queue known to have room.
rcnResult_t VerbsWire::postNow(int peer, ibv_send_wr* wr) {
  Peer& p = peers_[peer];
  uint64_t index = ++p.posted;
  if (index % kSignalEvery == 0) wr->send_flags |= IBV_SEND_SIGNALED;
  wr->wr_id = (uint64_t(peer) << 48) | index;
  ibv_send_wr* bad = nullptr;
  int err = verbsApi().postSend(p.qp, wr, &bad);
  if (err != 0)
    return fail("verbs wire: ibv_post_send to rank " + std::to_string(peer) + " failed: " + strerror(err));
  return rcnSuccess;
}

rcnResult_t VerbsWire::put(int peer, size_t localOffset, size_t remoteOffset, size_t bytes) {
  RCN_CHECK(checkPut(peer, localOffset, remoteOffset, bytes));
  if (bytes == 0) return rcnSuccess;
  ibv_sge sge{reinterpret_cast<uint64_t>(base_ + localOffset), uint32_t(bytes), mr_->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = peers_[peer].remoteBase + remoteOffset;
  wr.wr.rdma.rkey = peers_[peer].rkey;
  return post(peer, &wr);
}

rcnResult_t VerbsWire::putFlag(int peer, size_t flagIndex, uint32_t value) {
  RCN_CHECK(checkPutFlag(peer, flagIndex));
  // Inline: the 4 bytes are copied into the request at post time, so the
  // source needs no registration and may live on the stack.
  ibv_sge sge{reinterpret_cast<uint64_t>(&value), sizeof value, 0};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_INLINE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = peers_[peer].remoteBase + layout_.flagOffset + flagIndex * sizeof(uint32_t);
  wr.wr.rdma.rkey = peers_[peer].rkey;
  return post(peer, &wr);
}

// A QP can enter the error state without a completion to say so (e.g. an
// asynchronous event); look at every QP's state now and then.
rcnResult_t VerbsWire::checkQpStates() {
  auto now = std::chrono::steady_clock::now();
  if (now - lastQpCheck_ < std::chrono::milliseconds(50)) return rcnSuccess;
  lastQpCheck_ = now;
  for (int r = 0; r < nranks_; ++r) {
    if (!peers_[r].qp) continue;
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (verbsApi().queryQp(peers_[r].qp, &attr, IBV_QP_STATE, &init) == 0 &&
        (attr.qp_state == IBV_QPS_ERR || attr.qp_state == IBV_QPS_SQE))
      return fail("verbs wire: the queue pair to rank " + std::to_string(r) + " is in the error state");
  }
  return rcnSuccess;
}

// The last call's writes are unsignaled and may still be in flight: the
// QPs' destruction would drop them, and a peer still waiting for our flags
// would time out on a clean shutdown. A signaled empty write per QP covers
// every request before it (RC completes in order); wait (closeDeadline)
// until each has completed.
void VerbsWire::close() {
  if (stopped()) return;
  for (int r = 0; r < nranks_; ++r) {
    Peer& p = peers_[r];
    // A full send queue cannot take it: those writes go unconfirmed.
    if (!p.qp || p.completed == p.posted || p.posted - p.completed >= uint64_t(kSendDepth - 1)) continue;
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.num_sge = 0;
    wr.wr.rdma.remote_addr = p.remoteBase;
    wr.wr.rdma.rkey = p.rkey;
    if (postNow(r, &wr) != rcnSuccess) return;
  }
  auto allCompleted = [&] {
    for (const Peer& p : peers_)
      if (p.completed != p.posted) return false;
    return true;
  };
  // Only reaping moves `completed`; once the CQ cannot be polled, nothing more completes.
  (void)pollUntil(closeDeadline(timeoutMs_), std::chrono::microseconds(20),
                  [&] { return allCompleted() || reap(/*closing=*/true) != rcnSuccess; });
}

rcnResult_t VerbsWire::progress() {
  if (failure_.failed()) return rcnRemoteError;
  RCN_CHECK(reap(/*closing=*/false));
  return checkQpStates();
}

// Reaps finished requests. An error completion is the wire's failure, except
// while closing: a peer that closed first may have destroyed its QP, so our
// last write to it fails, and is then simply over.
rcnResult_t VerbsWire::reap(bool closing) {
  ibv_wc wc[16];
  int n = verbsApi().pollCq(cq_, 16, wc);
  if (n < 0) return closing ? rcnRemoteError : fail("verbs wire: ibv_poll_cq failed");
  for (int i = 0; i < n; ++i) {
    int peer = int(wc[i].wr_id >> 48);
    const bool known = peer >= 0 && peer < nranks_;
    if (wc[i].status != IBV_WC_SUCCESS) {
      if (closing) {
        if (known) peers_[peer].completed = peers_[peer].posted;  // nothing more completes on that QP
        continue;
      }
      char text[200];
      std::snprintf(text, sizeof text,
                    "verbs wire: a write to rank %d completed with error '%s' (status %d, vendor error 0x%x)",
                    peer, verbsApi().wcStatusStr(wc[i].status), int(wc[i].status), wc[i].vendor_err);
      return fail(text);
    }
    // RC completes in order: this signaled request finished every earlier one.
    if (known)
      peers_[peer].completed = std::max<uint64_t>(peers_[peer].completed, wc[i].wr_id & ((1ull << 48) - 1));
  }
  return rcnSuccess;
}

}  // namespace

rcnResult_t createVerbsWire(const FastPathContext& ctx, const WireLayout& layout, const DeviceRegion* device,
                            std::unique_ptr<Wire>* out, std::string* why) {
  out->reset();
  auto wire = std::make_unique<VerbsWire>();
  rcnResult_t res = wire->setup(ctx, layout, device, why);
  if (res != rcnSuccess) {
    RCN_WARN(RCN_LOG_TRANSPORT, "%s", why->c_str());
    return res;
  }
  RCN_INFO(RCN_LOG_TRANSPORT, "verbs wire: rank %d connected %d RC queue pairs (region in %s)", ctx.rank,
           ctx.nranks - 1, !device ? "host memory" : device->dmabufFd >= 0 ? "GPU memory, dma-buf" : "GPU memory, peermem");
  *out = std::move(wire);
  return rcnSuccess;
}

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
