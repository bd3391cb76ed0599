// SPDX-License-Identifier: BSD-3-Clause
// rocenante-probe --rdma-check's logic (tools/rocenante-probe/probe_rdma_check.h)
// on the software NIC of verbs_mock.h, ranks as threads: the report's ports,
// every pair measured with both flag protocols, the ordering stress finding
// the ordered protocol's stale payloads under weak ordering and none with
// the default, the verdicts, and a machine without RDMA.
#include <catch2/catch_test_macros.hpp>

#if !ROCENANTE_HAVE_IBVERBS
TEST_CASE("rdma check mocked tests", "[verbs]") { SKIP("built without libibverbs"); }
#else

#include <thread>

#include "core/bootstrap.h"
#include "probe_rdma_check.h"
#include "support/scoped_env.h"
#include "verbs_mock_scope.h"

using namespace rcn;
using namespace rcn::test;

namespace {

// The check on `ranks` threads; rank 0's report.
probe::RdmaCheckReport runCheck(int ranks, const probe::RdmaCheckOptions& options) {
  auto group = makeLocalBootstrapGroup(ranks);
  std::vector<probe::RdmaCheckReport> reports(ranks);
  std::vector<rcnResult_t> results(ranks, rcnSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto boot = bootstrapInitLocal(group, r);
      results[r] = probe::rdmaCheck(*boot, options, &reports[r]);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) CHECK(results[r] == rcnSuccess);
  for (int r = 1; r < ranks; ++r) CHECK(reports[r].verdict == reports[0].verdict);
  return reports[0];
}

probe::RdmaCheckOptions small() {
  probe::RdmaCheckOptions o;
  o.latencyRounds = 20;
  o.bandwidthBytes = 64 * 1024;
  o.bandwidthWrites = 4;
  o.orderingWrites = 400;
  o.timeoutMs = 5000;
  return o;
}

}  // namespace

TEST_CASE("rdma check: every pair with both protocols; weak ordering catches the ordered flags", "[verbs][probe]") {
  MockScope scope(weaklyOrdered());
  probe::RdmaCheckReport r = runCheck(3, small());
  REQUIRE(r.nranks == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(r.rankHasPort[i]);
    CHECK(r.ports[i].device == "mlx5_0");
    CHECK(r.ports[i].gidIndex == 3);
    CHECK(r.ports[i].mtuBytes == 4096);
    CHECK(r.ports[i].gid == "::ffff:10.0.0.1");
  }
  REQUIRE(r.pairs.size() == 6);  // 3 pairs x 2 protocols
  int64_t staleOrdered = 0;
  for (const probe::RdmaPairResult& p : r.pairs) {
    INFO(p.from << "->" << p.to << " " << p.protocol << ": " << p.why);
    CHECK(p.ok);
    CHECK(p.writes == 400);
    CHECK(p.latencyUs > 0);
    CHECK(p.bandwidthGBs > 0);
    if (p.protocol == "imm") CHECK(p.stale == 0);
    else staleOrdered += p.stale;
  }
  CHECK(staleOrdered > 0);
  CHECK(r.fastPath);
  CHECK(r.protocol == "imm");
  CHECK(r.verdict.find("will be used") != std::string::npos);
  CHECK(r.verdict.find("never set ROCENANTE_IB_FLAGS=ordered") != std::string::npos);
  const std::string text = probe::rdmaCheckText(r);
  CHECK(text.find("rank 2: mlx5_0 port 1, GID 3 ::ffff:10.0.0.1, MTU 4096, Ethernet (RoCE)") != std::string::npos);
  CHECK(text.find("verdict: ") != std::string::npos);
  const std::string json = probe::rdmaCheckJson(r);
  CHECK(json.find("\"fast_path\": true") != std::string::npos);
  CHECK(json.find("\"flags\": \"ordered\"") != std::string::npos);
}

TEST_CASE("rdma check: a machine without RDMA says so and why, and the verdict says no", "[verbs][probe]") {
  MockScope scope;
  scope.api = VerbsApi{};  // libibverbs not loaded
  probe::RdmaCheckReport r = runCheck(2, small());
  CHECK_FALSE(r.rankHasPort[0]);
  CHECK(r.pairs.empty());
  CHECK_FALSE(r.fastPath);
  CHECK(r.verdict.find("will not be used: rank 0 has no usable RDMA port") != std::string::npos);
  CHECK(probe::rdmaCheckText(r).find("rank 1: no usable RDMA port") != std::string::npos);
}

TEST_CASE("rdma check: alone it reports this host's port and asks for more hosts", "[verbs][probe]") {
  MockScope scope;
  probe::RdmaCheckReport r = runCheck(1, small());
  CHECK(r.rankHasPort[0]);
  CHECK(r.pairs.empty());
  CHECK(r.verdict.find("two or more hosts") != std::string::npos);
}

TEST_CASE("rdma check: with two devices listed it reports both rails and measures them together and alone",
          "[verbs][probe]") {
  MockScope scope(weaklyOrdered());
  ScopedEnv hca("NCCL_IB_HCA", "mlx5_0,mlx5_1");
  ScopedEnv stripe("ROCENANTE_IB_STRIPE_BYTES", "16K");  // the 64 KB bandwidth writes are striped
  probe::RdmaCheckReport r = runCheck(2, small());
  for (int i = 0; i < 2; ++i) {
    REQUIRE(r.rails[i].size() == 2);
    CHECK(r.rails[i][0].device == "mlx5_0");
    CHECK(r.rails[i][1].device == "mlx5_1");
  }
  REQUIRE(r.pairs.size() == 4);  // one pair: imm and ordered over both rails, then imm on each alone
  CHECK(r.pairs[0].rail == -1);
  CHECK(r.pairs[1].rail == -1);
  CHECK(r.pairs[2].rail == 0);
  CHECK(r.pairs[3].rail == 1);
  for (const probe::RdmaPairResult& p : r.pairs) {
    INFO(p.why);
    CHECK(p.ok);
    CHECK(p.bandwidthGBs > 0);
    if (p.protocol == "imm") CHECK(p.stale == 0);
  }
  CHECK(r.railWhy == std::vector<std::string>{"", ""});
  CHECK(r.fastPath);
  const std::string text = probe::rdmaCheckText(r);
  CHECK(text.find("rank 1 rail 1: mlx5_1 port 1") != std::string::npos);
  CHECK(text.find("imm      1 ") != std::string::npos);
  CHECK(probe::rdmaCheckJson(r).find("\"rail\": 1") != std::string::npos);
}

TEST_CASE("rdma check: ports that are all down leave no fast path, saying why", "[verbs][probe]") {
  MockScope scope;
  mock::setPortDown("mlx5_0", 1);
  mock::setPortDown("mlx5_1", 1);
  probe::RdmaCheckReport r = runCheck(2, small());
  CHECK_FALSE(r.fastPath);
  CHECK(r.verdict.find("no usable RDMA port") != std::string::npos);
}

#endif  // ROCENANTE_HAVE_IBVERBS
