// The verbs wire without hardware: every ibverbs call goes to a mock that
// records what is posted and performs RDMA WRITEs in software (a memcpy into
// the registered region the rkey names), so the wire and the host backend run
// end to end in one process with one thread per rank.
#include <catch2/catch_test_macros.hpp>

#if !ROCENANTE_HAVE_IBVERBS
TEST_CASE("verbs wire mocked tests", "[verbs]") { SKIP("built without libibverbs"); }
#else

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/bootstrap.h"
#include "test_host_util.h"
#include "test_verbs_fake_sysfs.h"
#include "transport/wire/verbs_api.h"
#include "transport/wire/verbs_select.h"
#include "transport/wire/wire.h"

using namespace rcn;
using namespace rcn::test;

namespace {

struct Posted {
  uint32_t qpn;
  ibv_wr_opcode opcode;
  unsigned flags;
  uint32_t length;
  uint64_t localAddr;
  uint32_t lkey;
  uint64_t remoteAddr;
  uint32_t rkey;
  uint32_t inlineValue;
};

struct Transition {
  uint32_t qpn;
  ibv_qp_state state;
  uint32_t destQpn;
  int sgidIndex;
  int isGlobal;
  ibv_mtu mtu;
};

// The mock's whole state; one lock, since ranks are threads.
struct Mock {
  std::mutex mu;
  const char* names[2] = {"mlx5_0", "mlx5_1"};
  ibv_device devices[2]{};
  ibv_device* list[3] = {&devices[0], &devices[1], nullptr};
  std::map<ibv_context*, int> contexts;  // -> device index
  std::map<uint32_t, ibv_mr*> mrByRkey;
  std::map<ibv_cq*, std::deque<ibv_wc>> cqs;
  std::map<ibv_qp*, ibv_cq*> qpCq;
  std::vector<Posted> posted;
  std::vector<Transition> transitions;
  std::vector<int> gidQueries;
  std::vector<std::string> opened;
  std::vector<int> mrAccess;
  std::vector<void*> regMrAddrs;  // what ibv_reg_mr was given
  struct DmabufReg {
    uint64_t offset;
    size_t length;
    uint64_t iova;
    int fd;
  };
  std::vector<DmabufReg> dmabufRegs;
  std::vector<ibv_qp_init_attr> qpInits;
  uint32_t nextKey = 0x100, nextQpn = 0x40;
  int port2Active = 0;
  int failCreateQpCall = -1;  // fail the n-th create_qp (0-based)
  int createQpCalls = 0;
  uint32_t errorQpn = 0;      // query_qp reports this QP in error
  ibv_wc_status injectStatus = IBV_WC_SUCCESS;

  void reset() {
    std::lock_guard<std::mutex> lock(mu);
    posted.clear();
    transitions.clear();
    gidQueries.clear();
    opened.clear();
    mrAccess.clear();
    regMrAddrs.clear();
    dmabufRegs.clear();
    qpInits.clear();
    failCreateQpCall = -1;
    createQpCalls = 0;
    errorQpn = 0;
    injectStatus = IBV_WC_SUCCESS;
  }
};
Mock gMock;

int devIndex(ibv_device* d) { return d == &gMock.devices[0] ? 0 : 1; }

ibv_device** mGetDeviceList(int* n) { *n = 2; return gMock.list; }
void mFreeDeviceList(ibv_device**) {}
const char* mGetDeviceName(ibv_device* d) { return gMock.names[devIndex(d)]; }
ibv_context* mOpenDevice(ibv_device* d) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  auto* c = new ibv_context{};
  gMock.contexts[c] = devIndex(d);
  gMock.opened.push_back(gMock.names[devIndex(d)]);
  return c;
}
int mCloseDevice(ibv_context* c) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  gMock.contexts.erase(c);
  delete c;
  return 0;
}
int mQueryDevice(ibv_context*, ibv_device_attr* a) { *a = ibv_device_attr{}; a->phys_port_cnt = 2; return 0; }
int mQueryPort(ibv_context*, uint8_t port, ibv_port_attr* a) {
  *a = ibv_port_attr{};
  a->state = (port == 1 || gMock.port2Active) ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  a->active_mtu = IBV_MTU_4096;
  return 0;
}
int mQueryGid(ibv_context*, uint8_t, int index, ibv_gid* gid) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  gMock.gidQueries.push_back(index);
  parseGidText(kIpv4Gid, gid->raw);
  return 0;
}
ibv_pd* mAllocPd(ibv_context* c) { auto* pd = new ibv_pd{}; pd->context = c; return pd; }
int mDeallocPd(ibv_pd* pd) { delete pd; return 0; }
ibv_mr* newMr(ibv_pd* pd, void* addr, size_t len, int access) {
  auto* mr = new ibv_mr{};
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = len;
  mr->lkey = gMock.nextKey++;
  mr->rkey = gMock.nextKey++;
  gMock.mrByRkey[mr->rkey] = mr;
  gMock.mrAccess.push_back(access);
  return mr;
}
ibv_mr* mRegMr(ibv_pd* pd, void* addr, size_t len, int access) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  gMock.regMrAddrs.push_back(addr);
  return newMr(pd, addr, len, access);
}
// The software NIC reaches a dma-buf's memory at its iova (here the fake
// device region is host memory, so the iova is also where to memcpy).
ibv_mr* mRegDmabufMr(ibv_pd* pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  gMock.dmabufRegs.push_back({offset, len, iova, fd});
  return newMr(pd, reinterpret_cast<void*>(iova), len, access);
}
int mDeregMr(ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  gMock.mrByRkey.erase(mr->rkey);
  delete mr;
  return 0;
}
ibv_cq* mCreateCq(ibv_context* c, int, void*, ibv_comp_channel*, int) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  auto* cq = new ibv_cq{};
  cq->context = c;
  gMock.cqs[cq];
  return cq;
}
int mDestroyCq(ibv_cq* cq) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  gMock.cqs.erase(cq);
  delete cq;
  return 0;
}
ibv_qp* mCreateQp(ibv_pd* pd, ibv_qp_init_attr* init) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  if (gMock.createQpCalls++ == gMock.failCreateQpCall) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* qp = new ibv_qp{};
  qp->context = pd->context;
  qp->pd = pd;
  qp->qp_num = gMock.nextQpn++;
  gMock.qpCq[qp] = init->send_cq;
  gMock.qpInits.push_back(*init);
  return qp;
}
int mDestroyQp(ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  gMock.qpCq.erase(qp);
  delete qp;
  return 0;
}
int mModifyQp(ibv_qp* qp, ibv_qp_attr* a, int) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  gMock.transitions.push_back({qp->qp_num, a->qp_state, a->dest_qp_num, a->ah_attr.grh.sgid_index,
                               a->ah_attr.is_global, a->path_mtu});
  return 0;
}
int mQueryQp(ibv_qp* qp, ibv_qp_attr* a, int, ibv_qp_init_attr*) {
  a->qp_state = qp->qp_num == gMock.errorQpn ? IBV_QPS_ERR : IBV_QPS_RTS;
  return 0;
}
// Software RDMA: record the request, perform the write, complete if signaled.
int mPostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  for (; wr; wr = wr->next) {
    const ibv_sge none{};  // an empty write (the closing one) has no scatter entry
    const ibv_sge& sge = wr->num_sge > 0 ? wr->sg_list[0] : none;
    Posted p{qp->qp_num, wr->opcode, unsigned(wr->send_flags), sge.length, sge.addr, sge.lkey,
             wr->wr.rdma.remote_addr, wr->wr.rdma.rkey, 0};
    if (wr->send_flags & IBV_SEND_INLINE) std::memcpy(&p.inlineValue, reinterpret_cast<void*>(p.localAddr), 4);
    gMock.posted.push_back(p);
    auto mr = gMock.mrByRkey.find(p.rkey);
    uint64_t base = mr == gMock.mrByRkey.end() ? 0 : reinterpret_cast<uint64_t>(mr->second->addr);
    bool inBounds = mr != gMock.mrByRkey.end() && p.remoteAddr >= base &&
                    p.remoteAddr + p.length <= base + mr->second->length;
    ibv_wc_status status = !inBounds ? IBV_WC_REM_ACCESS_ERR : gMock.injectStatus;
    if (status == IBV_WC_SUCCESS && p.length == sizeof(uint32_t) && p.remoteAddr % sizeof(uint32_t) == 0) {
      // A flag: the NIC's write of an aligned word lands whole, and the
      // peer polls it with atomic loads (a plain copy races with them).
      uint32_t word;
      std::memcpy(&word, reinterpret_cast<void*>(p.localAddr), sizeof word);
      __atomic_store_n(reinterpret_cast<uint32_t*>(p.remoteAddr), word, __ATOMIC_RELEASE);
    } else if (status == IBV_WC_SUCCESS && p.length > 0) {  // a zero-length put may carry no address
      std::memcpy(reinterpret_cast<void*>(p.remoteAddr), reinterpret_cast<void*>(p.localAddr), p.length);
    }
    if ((wr->send_flags & IBV_SEND_SIGNALED) || status != IBV_WC_SUCCESS) {
      ibv_wc wc{};
      wc.wr_id = wr->wr_id;
      wc.status = status;
      wc.qp_num = qp->qp_num;
      gMock.cqs[gMock.qpCq[qp]].push_back(wc);
    }
  }
  *bad = nullptr;
  return 0;
}
int mPollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  std::lock_guard<std::mutex> lock(gMock.mu);
  auto& q = gMock.cqs[cq];
  int got = 0;
  while (got < n && !q.empty()) {
    wc[got++] = q.front();
    q.pop_front();
  }
  return got;
}

// The test links no libibverbs; its names stand in for ibv_wc_status_str's.
const char* mWcStatusStr(ibv_wc_status status) {
  return status == IBV_WC_SUCCESS ? "success" : status == IBV_WC_RETRY_EXC_ERR ? "transport retry counter exceeded"
                                                                               : "other error";
}

VerbsApi mockApi() {
  VerbsApi api{};
  api.getDeviceList = mGetDeviceList;
  api.freeDeviceList = mFreeDeviceList;
  api.getDeviceName = mGetDeviceName;
  api.openDevice = mOpenDevice;
  api.closeDevice = mCloseDevice;
  api.queryDevice = mQueryDevice;
  api.queryPort = mQueryPort;
  api.queryGid = mQueryGid;
  api.allocPd = mAllocPd;
  api.deallocPd = mDeallocPd;
  api.regMr = mRegMr;
  api.regDmabufMr = mRegDmabufMr;
  api.deregMr = mDeregMr;
  api.createCq = mCreateCq;
  api.destroyCq = mDestroyCq;
  api.createQp = mCreateQp;
  api.destroyQp = mDestroyQp;
  api.modifyQp = mModifyQp;
  api.queryQp = mQueryQp;
  api.postSend = mPostSend;
  api.pollCq = mPollCq;
  api.wcStatusStr = mWcStatusStr;
  return api;
}

// Installs the mock and a fake sysfs for the duration of a test.
struct MockScope {
  VerbsApi api = mockApi();
  FakeSysfs sysfs;
  MockScope() {
    gMock.reset();
    addConnectXGids(sysfs, "mlx5_0", 1);
    addConnectXGids(sysfs, "mlx5_1", 1);
    setVerbsApiForTest(&api);
    setVerbsSysfsRootForTest(sysfs.root().c_str());
    unsetenv("ROCENANTE_IB_HCA");
    unsetenv("NCCL_IB_HCA");
    unsetenv("ROCENANTE_IB_GID_INDEX");
    unsetenv("NCCL_IB_GID_INDEX");
  }
  ~MockScope() {
    setVerbsApiForTest(nullptr);
    setVerbsSysfsRootForTest(nullptr);
  }
};

constexpr int kRanks = 2;
const WireLayout kLayout{(1 << 16) + 64, 1 << 16, 16};

struct Built {
  std::unique_ptr<Wire> wires[kRanks];
  rcnResult_t results[kRanks];
  std::string whys[kRanks];
};

// Builds the wire on kRanks threads sharing an in-process bootstrap; with
// `device`, rank r's region is device[r] (GPUDirect RDMA).
void buildWires(Built* b, const DeviceRegion* device = nullptr) {
  auto group = makeLocalBootstrapGroup(kRanks);
  std::vector<std::unique_ptr<Bootstrap>> bs;
  for (int r = 0; r < kRanks; ++r) bs.push_back(bootstrapInitLocal(group, r));
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      b->results[r] = createVerbsWire(hostContext(bs[r].get(), 0, 2000), kLayout, device ? &device[r] : nullptr,
                                      &b->wires[r], &b->whys[r]);
    });
  }
  for (auto& t : threads) t.join();
}

// buildWires, then rank 0's wire with nothing counted as posted yet, for
// the cases that look at the requests it posts.
Wire& builtRankZero(Built* b) {
  buildWires(b);
  REQUIRE(b->wires[0]);
  gMock.posted.clear();
  return *b->wires[0];
}


}  // namespace

TEST_CASE("verbs wire: QPs go INIT, RTR, RTS with the peer's QP number and the chosen GID", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.results[0] == rcnSuccess);
  REQUIRE(b.results[1] == rcnSuccess);
  REQUIRE(b.wires[0]);
  // Both ranks opened the first device and asked for GID 3 (first RoCE v2 IPv4).
  CHECK(gMock.opened[0] == "mlx5_0");
  for (int index : gMock.gidQueries) CHECK(index == 3);
  // RC, unsignaled by default, inline room for a flag.
  REQUIRE(gMock.qpInits.size() == 2);
  for (const ibv_qp_init_attr& init : gMock.qpInits) {
    CHECK(init.qp_type == IBV_QPT_RC);
    CHECK(init.sq_sig_all == 0);
    CHECK(init.cap.max_inline_data >= 4);
  }
  // Remote write allowed, relaxed ordering never (the flag must land last).
  for (int access : gMock.mrAccess) {
    CHECK((access & IBV_ACCESS_REMOTE_WRITE));
    CHECK_FALSE((access & IBV_ACCESS_RELAXED_ORDERING));
  }
  // Per QP: INIT, RTR, RTS in order; RTR names the other QP.
  std::map<uint32_t, std::vector<Transition>> byQp;
  for (const Transition& t : gMock.transitions) byQp[t.qpn].push_back(t);
  REQUIRE(byQp.size() == 2);
  uint32_t qpA = byQp.begin()->first, qpB = byQp.rbegin()->first;
  for (auto& [qpn, ts] : byQp) {
    REQUIRE(ts.size() == 3);
    CHECK(ts[0].state == IBV_QPS_INIT);
    CHECK(ts[1].state == IBV_QPS_RTR);
    CHECK(ts[2].state == IBV_QPS_RTS);
    CHECK(ts[1].destQpn == (qpn == qpA ? qpB : qpA));
    CHECK(ts[1].isGlobal == 1);
    CHECK(ts[1].sgidIndex == 3);
    CHECK(ts[1].mtu == IBV_MTU_4096);
  }
}

TEST_CASE("verbs wire: payload as an unsignaled RDMA WRITE, then the flag inline on the same QP", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  REQUIRE(b.wires[1]);
  Wire& w0 = *b.wires[0];
  Wire& w1 = *b.wires[1];
  for (int i = 0; i < 1000; ++i) w0.region()[i] = uint8_t(i * 7);
  gMock.posted.clear();
  REQUIRE(w0.put(1, 0, 256, 1000) == rcnSuccess);
  REQUIRE(w0.putFlag(1, 2, 99) == rcnSuccess);
  REQUIRE(gMock.posted.size() == 2);
  const Posted& data = gMock.posted[0];
  const Posted& flag = gMock.posted[1];
  CHECK(data.qpn == flag.qpn);  // same QP: RC order puts the flag after the payload
  CHECK(data.opcode == IBV_WR_RDMA_WRITE);
  CHECK((data.flags & (IBV_SEND_SIGNALED | IBV_SEND_INLINE)) == 0);
  CHECK(data.length == 1000);
  CHECK(data.localAddr == reinterpret_cast<uint64_t>(w0.region()));
  CHECK(data.remoteAddr == reinterpret_cast<uint64_t>(w1.region()) + 256);
  CHECK(flag.opcode == IBV_WR_RDMA_WRITE);
  CHECK((flag.flags & IBV_SEND_INLINE));
  CHECK(flag.length == 4);
  CHECK(flag.inlineValue == 99);
  CHECK(flag.remoteAddr == reinterpret_cast<uint64_t>(w1.flags() + 2));
  CHECK(flag.rkey == data.rkey);
  CHECK(data.lkey != data.rkey);
  // The software RDMA delivered both.
  CHECK(std::memcmp(w1.region() + 256, w0.region(), 1000) == 0);
  CHECK(w1.flags()[2] == 99);
  // Out-of-region puts are refused before anything is posted.
  CHECK(w0.put(1, 0, kLayout.regionBytes - 10, 100) == rcnInvalidArgument);
  CHECK(w0.putFlag(1, kLayout.flagCount, 1) == rcnInvalidArgument);
  CHECK(gMock.posted.size() == 2);
}

TEST_CASE("verbs wire: every 32nd request is signaled and completions free the send queue", "[verbs]") {
  MockScope scope;
  Built b;
  Wire& w0 = builtRankZero(&b);
  // 400 requests: more than the 128-entry send queue, so progress() must reap.
  for (int i = 0; i < 200; ++i) {
    REQUIRE(w0.put(1, 0, 0, 64) == rcnSuccess);
    REQUIRE(w0.putFlag(1, 0, uint32_t(i)) == rcnSuccess);
  }
  REQUIRE(gMock.posted.size() == 400);
  for (size_t i = 0; i < gMock.posted.size(); ++i) {
    bool signaled = gMock.posted[i].flags & IBV_SEND_SIGNALED;
    CHECK(signaled == ((i + 1) % 32 == 0));
  }
  CHECK(w0.progress() == rcnSuccess);
  CHECK(b.wires[1]->flags()[0] == 199);
}

// The last writes are unsignaled; close() makes sure they completed before
// the QPs go, with one signaled empty write per peer that has any pending.
TEST_CASE("verbs wire: close() confirms the last unsignaled writes with a signaled empty write", "[verbs]") {
  MockScope scope;
  Built b;
  Wire& w0 = builtRankZero(&b);
  REQUIRE(w0.put(1, 0, 0, 64) == rcnSuccess);
  REQUIRE(w0.putFlag(1, 0, 7) == rcnSuccess);
  w0.close();
  REQUIRE(gMock.posted.size() == 3);
  const Posted& last = gMock.posted.back();
  CHECK(last.opcode == IBV_WR_RDMA_WRITE);
  CHECK((last.flags & IBV_SEND_SIGNALED) != 0);
  CHECK(last.length == 0);
  CHECK(w0.error(nullptr) == rcnSuccess);
  // Nothing pending on a wire that posted nothing: close() posts nothing.
  const size_t before = gMock.posted.size();
  b.wires[1]->close();
  CHECK(gMock.posted.size() == before);
  // A peer that closed first may have destroyed its QP: a write that fails
  // while closing is over, not the wire's failure (no WARN, no error).
  gMock.injectStatus = IBV_WC_RETRY_EXC_ERR;
  REQUIRE(w0.putFlag(1, 0, 8) == rcnSuccess);
  w0.close();
  CHECK(w0.error(nullptr) == rcnSuccess);
}

TEST_CASE("verbs wire: an error completion becomes the wire's error, naming the peer", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  gMock.injectStatus = IBV_WC_RETRY_EXC_ERR;
  REQUIRE(b.wires[0]->put(1, 0, 0, 64) == rcnSuccess);  // posting succeeds; the completion fails
  CHECK(b.wires[0]->progress() == rcnRemoteError);
  std::string why;
  CHECK(b.wires[0]->error(&why) == rcnRemoteError);
  CHECK(why.find("rank 1") != std::string::npos);
  CHECK(why.find(mWcStatusStr(IBV_WC_RETRY_EXC_ERR)) != std::string::npos);
  CHECK(b.wires[0]->put(1, 0, 0, 64) == rcnRemoteError);  // nothing more is posted
}

TEST_CASE("verbs wire: a QP in the error state becomes the wire's error", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  gMock.errorQpn = gMock.qpInits.empty() ? 0 : gMock.transitions.front().qpn;
  rcnResult_t res = rcnSuccess;
  for (int i = 0; i < 200 && res == rcnSuccess; ++i) {  // the state check runs every 50 ms
    res = b.wires[0]->progress();
    if (res == rcnSuccess) res = b.wires[1]->progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(res == rcnRemoteError);
}

TEST_CASE("verbs wire: create_qp failing fails setup on every rank with a reason", "[verbs]") {
  MockScope scope;
  gMock.failCreateQpCall = 0;
  Built b;
  buildWires(&b);
  CHECK(b.results[0] != rcnSuccess);
  CHECK(b.results[1] != rcnSuccess);
  CHECK_FALSE(b.wires[0]);
  CHECK_FALSE(b.wires[1]);
  std::string both = b.whys[0] + " | " + b.whys[1];
  CHECK(both.find("ibv_create_qp") != std::string::npos);
  CHECK(both.find("could not set up RDMA") != std::string::npos);
}

TEST_CASE("verbs wire: ROCENANTE_IB_HCA picks and excludes devices and ports", "[verbs]") {
  MockScope scope;
  setenv("ROCENANTE_IB_HCA", "^mlx5_0", 1);
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  CHECK(gMock.opened.back() == "mlx5_1");

  gMock.reset();
  setenv("ROCENANTE_IB_HCA", "mlx5_0:2", 1);  // port 2 is down
  Built none;
  buildWires(&none);
  CHECK_FALSE(none.wires[0]);
  CHECK(none.whys[0].find("no active RDMA port matching") != std::string::npos);

  gMock.reset();
  unsetenv("ROCENANTE_IB_HCA");
  setenv("NCCL_IB_GID_INDEX", "1", 1);  // an explicit index wins over the sysfs search
  Built explicitGid;
  buildWires(&explicitGid);
  REQUIRE(explicitGid.wires[0]);
  for (int index : gMock.gidQueries) CHECK(index == 1);
  unsetenv("NCCL_IB_HCA");
  unsetenv("NCCL_IB_GID_INDEX");
  unsetenv("ROCENANTE_IB_HCA");
}

TEST_CASE("host backend runs end to end over the mocked verbs wire", "[verbs][host]") {
  MockScope scope;
  setenv("ROCENANTE_WIRE", "verbs", 1);
  auto group = makeLocalBootstrapGroup(kRanks);
  int failures[kRanks] = {};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto bs = bootstrapInitLocal(group, r);
      std::unique_ptr<FastPath> path;
      std::string why;
      if (createHostPath(hostContext(bs.get(), 2048, 5000), &path, &why) != rcnSuccess || !path) {
        failures[r] = 1000;
        return;
      }
      if (std::string(path->transportName()) != "host-verbs") failures[r] += 100;
      uint64_t seed = 500;
      for (rcnDataType_t t : {rcnFloat32, rcnBfloat16, rcnInt32, rcnFloat8e4m3}) {
        for (size_t count : {size_t(5), size_t(3000)}) {  // 3000 floats: chunked through 2 KB slots
          ++seed;
          auto in = rankInput(seed, r, kRanks, count, t, rcnSum);
          std::vector<uint8_t> out(in.size(), kPoisonByte);
          if (path->allReduce(in.data(), out.data(), count, t, rcnSum, nullptr) != rcnSuccess) {
            failures[r] += 10;
            return;
          }
          failures[r] += checkAgainstReference(out.data(), seed, kRanks, count, t, rcnSum, "verbs") != 0;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  unsetenv("ROCENANTE_WIRE");
  CHECK(failures[0] == 0);
  CHECK(failures[1] == 0);
}

// GPUDirect RDMA: the region comes from the proxy path (device memory; here
// host buffers stand in for it) and is registered as it is.
struct FakeDeviceRegions {
  std::vector<uint8_t> bytes[kRanks];
  DeviceRegion regions[kRanks];
  explicit FakeDeviceRegions(bool dmabuf) {
    for (int r = 0; r < kRanks; ++r) {
      bytes[r].assign(kLayout.regionBytes, 0);
      regions[r].ptr = bytes[r].data();
      regions[r].cudaDev = r;
      regions[r].dmabufFd = dmabuf ? 40 + r : -1;
    }
  }
};

TEST_CASE("verbs wire: a device region with a dma-buf is registered with ibv_reg_dmabuf_mr", "[verbs][gdr]") {
  MockScope scope;
  FakeDeviceRegions device(/*dmabuf=*/true);
  Built b;
  buildWires(&b, device.regions);
  REQUIRE(b.wires[0]);
  REQUIRE(b.wires[1]);
  CHECK(gMock.regMrAddrs.empty());
  REQUIRE(gMock.dmabufRegs.size() == 2);
  for (const auto& reg : gMock.dmabufRegs) {
    const int r = reg.fd - 40;
    REQUIRE((r == 0 || r == 1));
    CHECK(reg.offset == 0);
    CHECK(reg.length == kLayout.regionBytes);
    CHECK(reg.iova == reinterpret_cast<uint64_t>(device.regions[r].ptr));
  }
  for (int access : gMock.mrAccess) CHECK_FALSE((access & IBV_ACCESS_RELAXED_ORDERING));
  // The wire's region is the device region; puts read from it and land in
  // the peer's, at the address the peer advertised.
  CHECK(b.wires[0]->region() == device.regions[0].ptr);
  for (int i = 0; i < 512; ++i) device.bytes[0][i] = uint8_t(i * 5 + 1);
  gMock.posted.clear();
  REQUIRE(b.wires[0]->put(1, 0, 1024, 512) == rcnSuccess);
  REQUIRE(gMock.posted.size() == 1);
  CHECK(gMock.posted[0].localAddr == reinterpret_cast<uint64_t>(device.regions[0].ptr));
  CHECK(gMock.posted[0].remoteAddr == reinterpret_cast<uint64_t>(device.regions[1].ptr) + 1024);
  CHECK(std::memcmp(device.bytes[1].data() + 1024, device.bytes[0].data(), 512) == 0);
}

TEST_CASE("verbs wire: a device region without a dma-buf goes through ibv_reg_mr (peermem)", "[verbs][gdr]") {
  MockScope scope;
  FakeDeviceRegions device(/*dmabuf=*/false);
  Built b;
  buildWires(&b, device.regions);
  REQUIRE(b.wires[0]);
  CHECK(gMock.dmabufRegs.empty());
  REQUIRE(gMock.regMrAddrs.size() == 2);
  for (void* addr : gMock.regMrAddrs)
    CHECK((addr == device.regions[0].ptr || addr == device.regions[1].ptr));
  REQUIRE(b.wires[0]->putFlag(1, 3, 77) == rcnSuccess);
  CHECK(b.wires[1]->flags()[3] == 77);
}

TEST_CASE("verbs wire: a dma-buf region without ibv_reg_dmabuf_mr fails on every rank, saying why", "[verbs][gdr]") {
  MockScope scope;
  scope.api.regDmabufMr = nullptr;  // rdma-core before v34
  FakeDeviceRegions device(/*dmabuf=*/true);
  Built b;
  buildWires(&b, device.regions);
  CHECK(b.results[0] != rcnSuccess);
  CHECK(b.results[1] != rcnSuccess);
  CHECK_FALSE(b.wires[0]);
  CHECK(b.whys[0].find("ibv_reg_dmabuf_mr") != std::string::npos);
  CHECK(b.whys[1].find("ibv_reg_dmabuf_mr") != std::string::npos);
}

TEST_CASE("verbs wire: without libibverbs (an empty table) setup fails on every rank, saying why", "[verbs]") {
  MockScope scope;
  scope.api = VerbsApi{};  // what realVerbsApi() is where libibverbs.so.1 did not load
  CHECK_FALSE(verbsApiUsable(nullptr));
  Built b;
  buildWires(&b);
  for (int r = 0; r < kRanks; ++r) {
    CHECK(b.results[r] == rcnInvalidUsage);
    CHECK_FALSE(b.wires[r]);
    CHECK(b.whys[r].rfind("verbs wire: ", 0) == 0);
  }
  CHECK(gMock.posted.empty());
}

#endif  // ROCENANTE_HAVE_IBVERBS

