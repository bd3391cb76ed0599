// SPDX-License-Identifier: BSD-3-Clause
// The verbs wire without hardware, against the software NIC of verbs_mock.h:
// asynchronous, strict about the verbs contract, and (in its weak-ordering
// mode) as loose about when a write's bytes become visible as verbs allows.
// The wire, and the host backend on top of it, run end to end in one process
// with one thread per rank.
#include <catch2/catch_test_macros.hpp>

#if !ROCENANTE_HAVE_IBVERBS
TEST_CASE("verbs wire mocked tests", "[verbs]") { SKIP("built without libibverbs"); }
#else

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

#include "core/bootstrap.h"
#include "support/scoped_env.h"
#include "test_host_util.h"
#include "topology/topology.h"
#include "transport/wire/peer_link_watch.h"
#include "transport/wire/verbs_api.h"
#include "transport/wire/verbs_select.h"
#include "transport/wire/wire.h"
#include "verbs_mock_scope.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
const WireLayout kLayout{(1 << 16) + 64, 1 << 16, 16};
constexpr uint64_t kTimeoutMs = 2000;

struct Built {
  std::vector<std::unique_ptr<Wire> > wires;
  std::vector<rcnResult_t> results;
  std::vector<std::string> whys;
  // Destroys the wires before the mock goes (their QPs are the mock's).
  ~Built() { wires.clear(); }
};

// Builds the wire on `ranks` threads sharing an in-process bootstrap; with
// `device`, rank r's region is device[r] (GPUDirect RDMA); with topo, that
// is every rank's agreed topology.
void buildWires(Built* b, const DeviceRegion* device = nullptr, int ranks = kRanks, const CommTopo* topo = nullptr) {
  b->wires.resize(ranks);
  b->results.assign(ranks, rcnSuccess);
  b->whys.assign(ranks, "");
  auto group = makeLocalBootstrapGroup(ranks);
  std::vector<std::unique_ptr<Bootstrap>> bs;
  for (int r = 0; r < ranks; ++r) bs.push_back(bootstrapInitLocal(group, r));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      FastPathContext ctx = hostContext(bs[r].get(), 0, kTimeoutMs);
      ctx.topo = topo;
      b->results[r] = createVerbsWire(ctx, kLayout, device ? &device[r] : nullptr, &b->wires[r], &b->whys[r]);
    });
  }
  for (auto& t : threads) t.join();
}

// Progress on every wire until pred() holds or `ms` pass.
template <typename Pred>
bool progressUntil(Built& b, Pred pred, int ms = 2000) {
  const Deadline deadline = deadlineAfterMs(ms);
  while (!pred()) {
    for (auto& w : b.wires)
      if (w) (void)w->progress();
    if (expired(deadline)) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

uint32_t flagOf(const Wire& w, size_t index) { return __atomic_load_n(&w.flags()[index], __ATOMIC_ACQUIRE); }

}  // namespace

TEST_CASE("verbs wire: QPs go INIT, RTR, RTS with the peer's QP, the chosen GID and NCCL's defaults", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.results[0] == rcnSuccess);
  REQUIRE(b.results[1] == rcnSuccess);
  CHECK(mock::opened()[0] == "mlx5_0");
  for (int index : mock::gidQueries()) CHECK(index == 3);  // the first RoCE v2 IPv4 GID
  CHECK(mock::badTransitions() == 0);
  CHECK(mock::forkInitCalls() >= 1);
  for (const ibv_qp_init_attr& init : mock::qpInits()) {
    CHECK(init.qp_type == IBV_QPT_RC);
    CHECK(init.sq_sig_all == 0);
    CHECK(init.cap.max_inline_data >= 4);
    CHECK(init.cap.max_recv_wr >= 16);
  }
  // Each rank: the region with relaxed ordering (imm mode), the shadow array strict.
  std::vector<int> access = mock::mrAccess();
  REQUIRE(access.size() == 4);
  int relaxed = 0;
  for (int a : access) {
    CHECK((a & IBV_ACCESS_REMOTE_WRITE));
    relaxed += (a & IBV_ACCESS_RELAXED_ORDERING) != 0;
  }
  CHECK(relaxed == 2);
  std::map<uint32_t, std::vector<MockTransition> > byQp;
  for (const MockTransition& t : mock::transitions()) byQp[t.qpn].push_back(t);
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
    CHECK(ts[1].trafficClass == 0);
    CHECK(ts[1].serviceLevel == 0);
    CHECK(ts[2].timeout == 20);  // NCCL_IB_TIMEOUT's default
    CHECK(ts[2].retryCnt == 7);
  }
}

TEST_CASE("verbs wire: the ordered flag mode, or an rdma-core without ibv_reg_mr_iova2, registers strictly",
          "[verbs]") {
  MockScope scope;
  {
    ScopedEnv ordered("ROCENANTE_IB_FLAGS", "ordered");
    Built b;
    buildWires(&b);
    REQUIRE(b.wires[0]);
    for (int a : mock::mrAccess()) CHECK_FALSE((a & IBV_ACCESS_RELAXED_ORDERING));
  }
  mock::configure({}, {});
  scope.api.regMrIova2 = nullptr;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  for (int a : mock::mrAccess()) CHECK_FALSE((a & IBV_ACCESS_RELAXED_ORDERING));
}

TEST_CASE("verbs wire: NCCL_IB_TC, NCCL_IB_SL, NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT reach the QPs", "[verbs]") {
  MockScope scope;
  ScopedEnv tc("NCCL_IB_TC", "106"), sl("NCCL_IB_SL", "3"), timeout("NCCL_IB_TIMEOUT", "18"),
      retry("NCCL_IB_RETRY_CNT", "5"), own("ROCENANTE_IB_TIMEOUT", "16");
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  for (const MockTransition& t : mock::transitions()) {
    if (t.state == IBV_QPS_RTR) CHECK((t.trafficClass == 106 && t.serviceLevel == 3));
    if (t.state == IBV_QPS_RTS) CHECK((t.timeout == 16 && t.retryCnt == 5));  // ROCENANTE_ wins
  }
  b.wires.clear();
  ScopedEnv bad("NCCL_IB_SL", "16");
  Built refused;
  buildWires(&refused);
  CHECK_FALSE(refused.wires[0]);
  CHECK(refused.whys[0].find("NCCL_IB_SL='16'") != std::string::npos);
}

TEST_CASE("verbs wire: payload and flag in one post; the flag is a write with immediate to the shadow array",
          "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[1]);
  Wire& w0 = *b.wires[0];
  Wire& w1 = *b.wires[1];
  for (int i = 0; i < 1000; ++i) w0.region()[i] = uint8_t(i * 7);
  mock::clearPosted();
  REQUIRE(w0.putWithFlag(1, 0, 256, 1000, 2, 99) == rcnSuccess);
  std::vector<MockPosted> posted = mock::posted();
  REQUIRE(posted.size() == 2);
  const MockPosted& data = posted[0];
  const MockPosted& flag = posted[1];
  CHECK(data.qpn == flag.qpn);
  CHECK(data.opcode == IBV_WR_RDMA_WRITE);
  CHECK((data.flags & (IBV_SEND_SIGNALED | IBV_SEND_INLINE)) == 0);  // 1000 bytes: past the inline room
  CHECK(data.length == 1000);
  CHECK(data.remoteAddr == reinterpret_cast<uint64_t>(w1.region()) + 256);
  CHECK(flag.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
  CHECK((flag.flags & IBV_SEND_INLINE));
  CHECK(flag.length == 4);
  CHECK(flag.inlineValue == 99);
  CHECK(flag.imm == 2);
  CHECK(flag.rkey != data.rkey);  // the shadow array, not the region the consumers read
  // The flag shows only once the receiving wire reaps the completion; the payload is there by then.
  REQUIRE(progressUntil(b, [&] { return flagOf(w1, 2) == 99; }));
  CHECK(std::memcmp(w1.region() + 256, w0.region(), 1000) == 0);
  // Small payloads go inline.
  mock::clearPosted();
  REQUIRE(w0.put(1, 0, 0, 48) == rcnSuccess);
  CHECK((mock::posted().at(0).flags & IBV_SEND_INLINE));
  // Out-of-region puts are refused before anything is posted.
  CHECK(w0.put(1, 0, kLayout.regionBytes - 10, 100) == rcnInvalidArgument);
  CHECK(w0.putFlag(1, kLayout.flagCount, 1) == rcnInvalidArgument);
  CHECK(mock::posted().size() == 1);
}

TEST_CASE("verbs wire: every 32nd request is signaled and completions free the send queue", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[1]);
  Wire& w0 = *b.wires[0];
  mock::clearPosted();
  // 400 requests: more than the 128-entry send queue, so the wire must reap;
  // the receiving side reaps too (its receives are reposted as they complete).
  std::thread receiver([&] {
    progressUntil(
        b, [&] { return flagOf(*b.wires[1], 0) == 199; }, 5000);
  });
  for (int i = 0; i < 200; ++i) REQUIRE(w0.putWithFlag(1, 0, 0, 256, 0, uint32_t(i)) == rcnSuccess);
  receiver.join();
  std::vector<MockPosted> posted = mock::posted();
  REQUIRE(posted.size() == 400);
  for (size_t i = 0; i < posted.size(); ++i) CHECK(bool(posted[i].flags & IBV_SEND_SIGNALED) == ((i + 1) % 32 == 0));
  CHECK(flagOf(*b.wires[1], 0) == 199);
  CHECK(mock::queryQpCalls() == 0);  // no ibv_query_qp in steady state
  CHECK(mock::cqOverruns() == 0);
}

TEST_CASE("verbs wire: close() confirms the last writes with a signaled goodbye the peer sees", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[1]);
  Wire& w0 = *b.wires[0];
  REQUIRE(w0.putWithFlag(1, 0, 0, 64, 0, 7) == rcnSuccess);
  mock::clearPosted();
  std::thread peer([&] { progressUntil(b, [&] { return b.wires[1]->peerLeft(0); }); });
  w0.close();
  peer.join();
  std::vector<MockPosted> posted = mock::posted();
  REQUIRE(posted.size() == 1);
  CHECK(posted[0].opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
  CHECK((posted[0].flags & IBV_SEND_SIGNALED));
  CHECK(posted[0].length == 0);
  CHECK(w0.error(nullptr) == rcnSuccess);
  CHECK(b.wires[1]->peerLeft(0));
  CHECK(flagOf(*b.wires[1], 0) == 7);  // the flag before the goodbye arrived first
  // Rank 1 closes after rank 0 left and destroyed its QPs: no retry timeout.
  b.wires[0].reset();
  const auto start = Clock::now();
  b.wires[1]->close();
  CHECK(Clock::now() - start < std::chrono::milliseconds(100));
  CHECK(b.wires[1]->error(nullptr) == rcnSuccess);
}

TEST_CASE("verbs wire: an error completion becomes the wire's error, naming the peer", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  mock::injectStatus(IBV_WC_REM_ACCESS_ERR);
  REQUIRE(b.wires[0]->put(1, 0, 0, 64) == rcnSuccess);  // posting succeeds; the completion fails
  REQUIRE(progressUntil(b, [&] { return b.wires[0]->error(nullptr) != rcnSuccess; }));
  std::string why;
  CHECK(b.wires[0]->error(&why) == rcnRemoteError);
  CHECK(why.find("rank 1") != std::string::npos);
  CHECK(why.find("remote access error") != std::string::npos);
  CHECK(b.wires[0]->put(1, 0, 0, 64) == rcnRemoteError);  // nothing more is posted
}

TEST_CASE("verbs wire: a QP's fatal event fails the wire through the event thread, no ibv_query_qp", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  mock::raiseQpFatal(mock::transitions().front().qpn);  // one rank's QP to the other
  REQUIRE(progressUntil(
      b, [&] { return b.wires[0]->error(nullptr) != rcnSuccess || b.wires[1]->error(nullptr) != rcnSuccess; }));
  std::string why;
  (b.wires[0]->error(&why) != rcnSuccess ? *b.wires[0] : *b.wires[1]).error(&why);
  CHECK(why.find("the queue pair to rank") != std::string::npos);
  CHECK(mock::queryQpCalls() == 0);
}

TEST_CASE("verbs wire: a port going down fails the wire, naming the port", "[verbs]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  mock::setPortDown("mlx5_0", 1);
  REQUIRE(progressUntil(b, [&] { return b.wires[0]->error(nullptr) != rcnSuccess; }));
  std::string why;
  b.wires[0]->error(&why);
  CHECK(why.find("port 1 went down") != std::string::npos);
}

// A peer whose QP broke while its process lives on (so its exit watch stays
// open): a write to it fails with RETRY_EXC once the QP's timeout and
// retries have run out (virtual time: NCCL's 4.096 us x 2^20 x 8 = 34 s
// passes in 34 ms).
TEST_CASE("verbs wire: a write to a peer whose QP broke fails with retry-exceeded after the timeout, naming it",
          "[verbs][faults]") {
  MockScope scope;
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[1]);
  mock::clearPosted();
  REQUIRE(b.wires[0]->putFlag(1, 0, 1) == rcnSuccess);
  REQUIRE(progressUntil(b, [&] { return flagOf(*b.wires[1], 0) == 1; }));
  const uint32_t rank0Qp = mock::posted().at(0).qpn;
  uint32_t rank1Qp = 0;
  for (const MockTransition& t : mock::transitions())
    if (t.qpn == rank0Qp && t.destQpn) rank1Qp = t.destQpn;
  REQUIRE(rank1Qp != 0);
  mock::raiseQpFatal(rank1Qp);
  const auto start = Clock::now();
  REQUIRE(b.wires[0]->putWithFlag(1, 0, 0, 64, 0, 2) == rcnSuccess);
  REQUIRE(progressUntil(b, [&] { return b.wires[0]->error(nullptr) != rcnSuccess; }));
  CHECK(Clock::now() - start >= std::chrono::milliseconds(30));
  std::string why;
  b.wires[0]->error(&why);
  CHECK(why.find("rank 1") != std::string::npos);
  CHECK(why.find("retry counter exceeded") != std::string::npos);
}

// A rank whose process ends without destroy or abort (killed, _exit): its
// exit watch's connections close with it, and every survivor fails within
// 100 ms naming it, long before a write to it would run out of retries.
TEST_CASE("verbs wire: a rank that ends without goodbye fails every survivor at once, naming it", "[verbs][faults]") {
  MockOptions slow;
  slow.virtualSpeedup = 1;  // a write to the gone rank would take NCCL's 34 s
  MockScope scope(slow);
  Built b;
  buildWires(&b, nullptr, 3);
  REQUIRE(b.wires[2]);
  b.wires[1].reset();  // no close(): as a crash, its QPs and connections gone
  const auto start = Clock::now();
  REQUIRE(b.wires[0]->putWithFlag(1, 0, 0, 64, 0, 1) == rcnSuccess);
  REQUIRE(progressUntil(
      b, [&] { return b.wires[0]->error(nullptr) != rcnSuccess && b.wires[2]->error(nullptr) != rcnSuccess; }));
  CHECK(Clock::now() - start < std::chrono::milliseconds(100));
  for (int r : {0, 2}) {
    std::string why;
    b.wires[r]->error(&why);
    INFO(why);
    CHECK(why.find("rank 1 exited without destroying or aborting its communicator") != std::string::npos);
  }
}

TEST_CASE("verbs wire: a rank that closes and then ends fails no survivor", "[verbs][faults]") {
  MockScope scope(weaklyOrdered());
  ScopedEnv hca("NCCL_IB_HCA", "mlx5_0,mlx5_1");  // a goodbye on each of two lanes
  Built b;
  buildWires(&b, nullptr, 3);
  REQUIRE(b.wires[2]);
  REQUIRE(b.wires[1]->putWithFlag(0, 0, 0, 64, 0, 1) == rcnSuccess);
  b.wires[1]->close();
  b.wires[1].reset();
  REQUIRE(progressUntil(b, [&] { return b.wires[0]->peerLeft(1) && b.wires[2]->peerLeft(1); }));
  CHECK(flagOf(*b.wires[0], 0) == 1);
  // Well past the watch's grace for a goodbye.
  progressUntil(
      b, [] { return false; }, 3 * int(PeerLinkWatch::kGoodbyeGraceMs));
  CHECK(b.wires[0]->error(nullptr) == rcnSuccess);
  CHECK(b.wires[2]->error(nullptr) == rcnSuccess);
}

TEST_CASE("verbs wire: abort tells every peer at once; each fails naming the aborting rank", "[verbs][faults]") {
  MockScope scope;
  Built b;
  buildWires(&b, nullptr, 3);
  REQUIRE(b.wires[2]);
  const auto start = Clock::now();
  b.wires[1]->abortWith("test: rank 1 gives up");
  REQUIRE(progressUntil(
      b, [&] { return b.wires[0]->error(nullptr) != rcnSuccess && b.wires[2]->error(nullptr) != rcnSuccess; }));
  CHECK(Clock::now() - start < std::chrono::milliseconds(100));
  for (int r : {0, 2}) {
    std::string why;
    b.wires[r]->error(&why);
    CHECK(why.find("rank 1 failed or aborted") != std::string::npos);
  }
}

TEST_CASE("verbs wire: each rank opens its GPU's nearest NIC first, unless an HCA list is set", "[verbs]") {
  MockScope scope;
  CommTopo topo;
  for (int r = 0; r < kRanks; ++r) {
    RankTopo rank;
    rank.rank = r;
    rank.cudaDev = 0;
    GpuInfo gpu;
    gpu.index = 0;
    gpu.nearestNic = "mlx5_1";
    rank.gpus.push_back(gpu);
    topo.ranks.push_back(rank);
  }
  Built b;
  buildWires(&b, nullptr, kRanks, &topo);
  REQUIRE(b.wires[0]);
  for (const std::string& name : mock::opened()) CHECK(name == "mlx5_1");
  VerbsPortSummary summary;
  std::string why;
  REQUIRE(verbsPortSummary(&summary, &why, "mlx5_1"));
  CHECK(summary.device == "mlx5_1");
  ScopedEnv hca("NCCL_IB_HCA", "mlx5_0");
  REQUIRE(verbsPortSummary(&summary, &why, "mlx5_1"));
  CHECK(summary.device == "mlx5_0");
}

TEST_CASE("verbs wire: ranks whose ports have different link layers are refused, naming both", "[verbs]") {
  MockPort infiniband;
  infiniband.linkLayer = IBV_LINK_LAYER_INFINIBAND;
  MockScope scope({}, {{"mlx5_0", {MockPort{}}}, {"mlx5_1", {infiniband}}});
  CommTopo topo;  // rank 0's GPU is nearest the RoCE NIC, rank 1's the InfiniBand one
  for (int r = 0; r < kRanks; ++r) {
    RankTopo rank;
    rank.cudaDev = 0;
    GpuInfo gpu;
    gpu.index = 0;
    gpu.nearestNic = r == 0 ? "mlx5_0" : "mlx5_1";
    rank.gpus.push_back(gpu);
    topo.ranks.push_back(rank);
  }
  Built b;
  buildWires(&b, nullptr, kRanks, &topo);
  for (int r = 0; r < kRanks; ++r) {
    CHECK(b.results[r] == rcnInvalidUsage);
    CHECK(b.whys[r].find("InfiniBand") != std::string::npos);
    CHECK(b.whys[r].find("Ethernet (RoCE)") != std::string::npos);
    CHECK(b.whys[r].find("cannot connect") != std::string::npos);
  }
}

TEST_CASE("verbs wire: a port with only link-local GIDs is passed over for the next usable one", "[verbs]") {
  MockScope scope;
  FakeSysfs linkLocalOnly;
  linkLocalOnly.addGid("mlx5_0", 1, 0, kLinkLocalGid, "IB/RoCE v1");
  linkLocalOnly.addGid("mlx5_0", 1, 1, kLinkLocalGid, "RoCE v2");
  addConnectXGids(linkLocalOnly, "mlx5_1", 1);
  setVerbsSysfsRootForTest(linkLocalOnly.root().c_str());
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[0]);
  CHECK(mock::opened().back() == "mlx5_1");
  // With the usable port excluded, setup names the port passed over and why.
  ScopedEnv hca("ROCENANTE_IB_HCA", "mlx5_0");
  Built none;
  buildWires(&none);
  CHECK_FALSE(none.wires[0]);
  CHECK(none.whys[0].find("mlx5_0:1") != std::string::npos);
  CHECK(none.whys[0].find("link-local") != std::string::npos);
}

TEST_CASE("verbs wire: create_qp failing fails setup on every rank with a reason", "[verbs]") {
  MockScope scope;
  mock::failCreateQpAt(0);
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

TEST_CASE("verbs wire: ranks with different ROCENANTE_IB_FLAGS are refused, naming it", "[verbs]") {
  MockScope scope;
  ScopedEnv bogus("ROCENANTE_IB_FLAGS", "sometimes");
  Built b;
  buildWires(&b);
  CHECK_FALSE(b.wires[0]);
  CHECK(b.whys[0].find("ROCENANTE_IB_FLAGS") != std::string::npos);
}

TEST_CASE("verbs wire: ROCENANTE_IB_HCA picks and excludes devices and ports", "[verbs]") {
  MockScope scope;
  {
    ScopedEnv hca("ROCENANTE_IB_HCA", "^mlx5_0");
    Built b;
    buildWires(&b);
    REQUIRE(b.wires[0]);
    CHECK(mock::opened().back() == "mlx5_1");
  }
  {
    ScopedEnv hca("ROCENANTE_IB_HCA", "mlx5_0:2");  // port 2 is down
    Built none;
    buildWires(&none);
    CHECK_FALSE(none.wires[0]);
    CHECK(none.whys[0].find("no usable RDMA port matching") != std::string::npos);
  }
  {
    ScopedEnv gid("NCCL_IB_GID_INDEX", "1");  // an explicit index wins over the sysfs search
    mock::configure({}, {});
    Built explicitGid;
    buildWires(&explicitGid);
    REQUIRE(explicitGid.wires[0]);
    for (int index : mock::gidQueries()) CHECK(index == 1);
  }
}

// The mock's own test: under weak ordering, a flag written after its payload
// on the same QP (ROCENANTE_IB_FLAGS=ordered, the protocol before this one)
// is seen before the payload; the default protocol never is.
namespace {

// Rounds of payload + flag; the reader takes each flag and counts payloads
// not yet all there. Returns the stale count.
int staleReads(Built& b, int rounds) {
  Wire& w0 = *b.wires[0];
  Wire& w1 = *b.wires[1];
  constexpr size_t kBytes = 4096;
  int stale = 0;
  for (int round = 1; round <= rounds; ++round) {
    const size_t phase = size_t(round % 2);
    uint8_t* src = w0.region() + phase * kBytes;
    std::memset(src, round & 0xff, kBytes);
    if (w0.putWithFlag(1, phase * kBytes, phase * kBytes, kBytes, phase, uint32_t(round)) != rcnSuccess) return -1;
    if (!progressUntil(b, [&] { return flagOf(w1, phase) == uint32_t(round); })) return -1;
    const uint8_t* dst = w1.region() + phase * kBytes;
    // The mock NIC may still be writing: read with atomic loads, as a poller of DMA'd memory must.
    auto landed = [&] {
      for (size_t i = 0; i < kBytes; ++i)
        if (__atomic_load_n(dst + i, __ATOMIC_RELAXED) != uint8_t(round & 0xff)) return false;
      return true;
    };
    if (!landed()) ++stale;
    // Let the rest land before the buffer is reused.
    progressUntil(b, landed);
  }
  return stale;
}

}  // namespace

TEST_CASE("verbs mock: under weak ordering the old flag-after-payload protocol reads stale payloads", "[verbs][mock]") {
  MockScope scope(weaklyOrdered());
  ScopedEnv ordered("ROCENANTE_IB_FLAGS", "ordered");
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[1]);
  const int stale = staleReads(b, 40);
  INFO("stale payloads seen: " << stale << " of 40");
  CHECK(stale > 0);
}

TEST_CASE("verbs wire: under weak ordering the default protocol never shows a flag before its payload",
          "[verbs][mock]") {
  MockScope scope(weaklyOrdered());
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[1]);
  CHECK(staleReads(b, 40) == 0);
  CHECK(mock::queryQpCalls() == 0);
}

namespace {

// The host backend on `ranks` threads over the mocked verbs wire; returns
// the failures (0: every result matched the float64 reference).
int runHostBackend(int ranks) {
  ScopedEnv wire("ROCENANTE_WIRE", "verbs");
  auto group = makeLocalBootstrapGroup(ranks);
  std::vector<int> failures(ranks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
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
          auto in = rankInput(seed, r, ranks, count, t, rcnSum);
          std::vector<uint8_t> out(in.size(), kPoisonByte);
          if (path->allReduce(in.data(), out.data(), count, t, rcnSum, nullptr) != rcnSuccess) {
            failures[r] += 10;
            return;
          }
          failures[r] += int(checkAgainstReference(out.data(), seed, ranks, count, t, rcnSum, "verbs"));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  int total = 0;
  for (int f : failures) total += f;
  return total;
}

}  // namespace

TEST_CASE("verbs wire: an HCA list of two devices opens a rail on each and spreads the peers", "[verbs][host]") {
  MockScope scope(weaklyOrdered());
  ScopedEnv hca("NCCL_IB_HCA", "mlx5_0,mlx5_1");
  ScopedEnv noStripes("ROCENANTE_IB_STRIPE_BYTES", "0");
  CHECK(runHostBackend(3) == 0);
  std::vector<std::string> devices = mock::qpDevices();
  REQUIRE(devices.size() == 6);  // 3 ranks x 2 peers
  CHECK(std::count(devices.begin(), devices.end(), "mlx5_0") == 3);
  CHECK(std::count(devices.begin(), devices.end(), "mlx5_1") == 3);
  CHECK(mock::badTransitions() == 0);
}

TEST_CASE("verbs wire: with two devices each pair stripes over a QP on each, end to end", "[verbs][host]") {
  MockScope scope(weaklyOrdered());
  ScopedEnv hca("NCCL_IB_HCA", "mlx5_0,mlx5_1");
  ScopedEnv stripe("ROCENANTE_IB_STRIPE_BYTES", "1024");  // the 3000-float calls' 2 KB slots are split
  CHECK(runHostBackend(3) == 0);
  std::vector<std::string> devices = mock::qpDevices();
  REQUIRE(devices.size() == 12);  // 3 ranks x 2 peers x 2 lanes
  CHECK(std::count(devices.begin(), devices.end(), "mlx5_0") == 6);
  CHECK(std::count(devices.begin(), devices.end(), "mlx5_1") == 6);
  CHECK(mock::badTransitions() == 0);
  CHECK(mock::queryQpCalls() == 0);
}

TEST_CASE("verbs wire: a striped payload's flag waits for every lane, weakly ordered", "[verbs][mock]") {
  MockScope scope(weaklyOrdered());
  ScopedEnv hca("NCCL_IB_HCA", "mlx5_0,mlx5_1");
  ScopedEnv stripe("ROCENANTE_IB_STRIPE_BYTES", "1024");
  Built b;
  buildWires(&b);
  REQUIRE(b.wires[1]);
  mock::clearPosted();
  CHECK(staleReads(b, 200) == 0);
  // Rank 0's writes: each round's payload is two halves on two QPs, each followed by its own flag.
  std::map<uint32_t, int> payloadBytesByQp, flagsByQp;
  for (const MockPosted& p : mock::posted()) {
    if (p.opcode == IBV_WR_RDMA_WRITE) payloadBytesByQp[p.qpn] += int(p.length);
    if (p.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) ++flagsByQp[p.qpn];
  }
  REQUIRE(payloadBytesByQp.size() == 2);
  for (const auto& [qpn, bytes] : payloadBytesByQp) CHECK(bytes == 200 * 2048);
  REQUIRE(flagsByQp.size() == 2);
  for (const auto& [qpn, flags] : flagsByQp) CHECK(flags == 200);
  CHECK(mock::queryQpCalls() == 0);
}

TEST_CASE("host backend runs end to end over the mocked verbs wire, weakly ordered, 3 ranks", "[verbs][host]") {
  MockScope scope(weaklyOrdered());
  CHECK(runHostBackend(3) == 0);
  CHECK(mock::queryQpCalls() == 0);
  CHECK(mock::badTransitions() == 0);
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
  std::vector<mock::DmabufReg> regs = mock::dmabufRegs();
  REQUIRE(regs.size() == 2);
  for (const auto& reg : regs) {
    const int r = reg.fd - 40;
    REQUIRE((r == 0 || r == 1));
    CHECK(reg.offset == 0);
    CHECK(reg.length == kLayout.regionBytes);
    CHECK(reg.iova == reinterpret_cast<uint64_t>(device.regions[r].ptr));
  }
  // Only the flags' shadow arrays (host memory) go through ibv_reg_mr.
  for (void* addr : mock::regMrAddrs()) CHECK((addr != device.regions[0].ptr && addr != device.regions[1].ptr));
  for (int access : mock::mrAccess()) CHECK_FALSE((access & IBV_ACCESS_RELAXED_ORDERING));
  CHECK(b.wires[0]->region() == device.regions[0].ptr);
  for (int i = 0; i < 512; ++i) device.bytes[0][i] = uint8_t(i * 5 + 1);
  mock::clearPosted();
  REQUIRE(b.wires[0]->put(1, 0, 1024, 512) == rcnSuccess);
  std::vector<MockPosted> posted = mock::posted();
  REQUIRE(posted.size() == 1);
  CHECK(posted[0].localAddr == reinterpret_cast<uint64_t>(device.regions[0].ptr));
  CHECK(posted[0].remoteAddr == reinterpret_cast<uint64_t>(device.regions[1].ptr) + 1024);
  CHECK((posted[0].flags & IBV_SEND_INLINE) == 0);  // the CPU cannot read device memory
  b.wires[0]->flushPuts();
  CHECK(progressUntil(b, [&] { return std::memcmp(device.bytes[1].data() + 1024, device.bytes[0].data(), 512) == 0; }));
  // No flags into device memory: the proxy path's staged LL lines carry their own tags.
  CHECK(b.wires[0]->putFlag(1, 3, 77) == rcnInvalidUsage);
}

TEST_CASE("verbs wire: a device region without a dma-buf goes through ibv_reg_mr (peermem)", "[verbs][gdr]") {
  MockScope scope;
  FakeDeviceRegions device(/*dmabuf=*/false);
  Built b;
  buildWires(&b, device.regions);
  REQUIRE(b.wires[0]);
  CHECK(mock::dmabufRegs().empty());
  int regionRegs = 0;
  for (void* addr : mock::regMrAddrs()) regionRegs += addr == device.regions[0].ptr || addr == device.regions[1].ptr;
  CHECK(regionRegs == 2);
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
  CHECK(mock::posted().empty());
}

#endif  // ROCENANTE_HAVE_IBVERBS
