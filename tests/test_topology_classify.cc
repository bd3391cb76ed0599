// SPDX-License-Identifier: BSD-3-Clause
// The communicator-wide class of real layouts, described by topology files in
// tests/fixtures/topology, with the reason text each one gives.
#include <catch2/catch_test_macros.hpp>

#include "test_topology_support.h"

using namespace rcn;
using topotest::classifyFile;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("2 DGX Sparks cabled directly: any-to-any over RDMA") {
  CommTopo t = classifyFile("spark-2node-direct.yaml");
  REQUIRE(t.ranks.size() == 2);
  CHECK(t.cls == TopoClass::MultiNodeAnyToAny);
  CHECK(t.nnodes == 2);
  CHECK(t.wire == "rdma");
  CHECK_FALSE(t.p2pEligible);
  INFO(t.reason);
  CHECK(contains(t.reason, "2 nodes on a common RDMA subnet 192.168.100.0/24"));
}

TEST_CASE("3-node ring: every pair has its own subnet, so any-to-any") {
  CommTopo t = classifyFile("spark-3node-ring.yaml");
  CHECK(t.cls == TopoClass::MultiNodeAnyToAny);
  CHECK(t.nnodes == 3);
  INFO(t.reason);
  CHECK(contains(t.reason, "3 nodes; every pair of nodes shares its own RDMA subnet"));
}

TEST_CASE("4-node physical ring: partial, naming the first pair without a path") {
  CommTopo t = classifyFile("spark-4node-ring.yaml");
  CHECK(t.cls == TopoClass::MultiNodePartial);
  CHECK(t.nnodes == 4);
  INFO(t.reason);
  CHECK(contains(t.reason, "nodes spark-1 and spark-3 share no RDMA subnet"));
  CHECK(contains(t.reason, "spark-1: 10.0.1.0/24, 10.0.4.0/24; spark-3: 10.0.2.0/24, 10.0.3.0/24"));
}

TEST_CASE("8-node physical ring: partial") {
  CommTopo t = classifyFile("spark-8node-ring.yaml");
  CHECK(t.cls == TopoClass::MultiNodePartial);
  CHECK(t.nnodes == 8);
  INFO(t.reason);
  CHECK(contains(t.reason, "8 nodes; nodes spark-1 and spark-3 share no RDMA subnet"));
}

TEST_CASE("4 nodes on a switch, two ranks per node: any-to-any, 4 nodes") {
  CommTopo t = classifyFile("switch-4node.yaml");
  REQUIRE(t.ranks.size() == 8);
  CHECK(t.cls == TopoClass::MultiNodeAnyToAny);
  CHECK(t.nnodes == 4);
  CHECK(t.nodeOfRank == std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3});
  INFO(t.reason);
  CHECK(contains(t.reason, "4 nodes on a common RDMA subnet 172.16.0.0/24"));
}

TEST_CASE("8 nodes on a switch: any-to-any") {
  CommTopo t = classifyFile("switch-8node.yaml");
  CHECK(t.cls == TopoClass::MultiNodeAnyToAny);
  CHECK(t.nnodes == 8);
  CHECK(contains(t.reason, "8 nodes on a common RDMA subnet"));
}

TEST_CASE("split subnets: two switches that do not meet are partial") {
  CommTopo t = classifyFile("split-subnets-4node.yaml");
  CHECK(t.cls == TopoClass::MultiNodePartial);
  INFO(t.reason);
  CHECK(contains(t.reason, "nodes spark-1 and spark-3 share no RDMA subnet (spark-1: 10.1.0.0/24; spark-3: 10.2.0.0/24)"));
}

TEST_CASE("8-GPU NVLink host: single host, p2p eligible") {
  CommTopo t = classifyFile("nvlink-host-8gpu.yaml");
  REQUIRE(t.ranks.size() == 8);
  CHECK(t.cls == TopoClass::SingleHost);
  CHECK(t.nnodes == 1);
  CHECK(t.p2pEligible);
  INFO(t.reason);
  CHECK(contains(t.reason, "single host 'gpu-host', 8 ranks; GPU pairs with peer access: 28 NVLink, 0 PCIe"));
}

TEST_CASE("2 GPUs without peer access: single host, p2p not eligible") {
  CommTopo t = classifyFile("pcie-host-no-p2p.yaml");
  CHECK(t.cls == TopoClass::SingleHost);
  CHECK_FALSE(t.p2pEligible);
  INFO(t.reason);
  CHECK(contains(t.reason, "GPU 0 of rank 0 has no peer access to GPU 1 of rank 1"));
}

TEST_CASE("ranks in separate processes match GPUs by PCI bus id, not CUDA ordinal") {
  CommTopo t = classifyFile("nvlink-host-8gpu.yaml");
  REQUIRE(t.ranks.size() == 8);
  // Rank 1 runs with CUDA_VISIBLE_DEVICES=1: it sees one GPU, as its device 0.
  RankTopo& r1 = t.ranks[1];
  GpuInfo own = r1.gpus[1];
  own.index = 0;
  own.links.clear();
  r1.gpus = {own};
  r1.cudaDev = 0;
  REQUIRE(topoClassify(&t) == rcnSuccess);
  CHECK(t.cls == TopoClass::SingleHost);
  CHECK(t.p2pEligible);  // rank 0 sees rank 1's GPU by bus id: NVLink
  INFO(t.reason);
  CHECK(contains(t.reason, "not visible to each other"));
}

TEST_CASE("multi-node without RDMA on some node: plain IPv4 interfaces decide (tcp)") {
  CommTopo t = classifyFile("spark-2node-direct.yaml");
  t.ranks[1].nics.clear();
  REQUIRE(topoClassify(&t) == rcnSuccess);
  CHECK(t.cls == TopoClass::MultiNodeAnyToAny);
  CHECK(t.wire == "tcp");
  INFO(t.reason);
  CHECK(contains(t.reason, "common IPv4 subnet 192.168.100.0/24"));
  CHECK(contains(t.reason, "node spark-2 has no active RoCE v2 or InfiniBand port"));
  t.ranks[1].netifs.clear();
  REQUIRE(topoClassify(&t) == rcnSuccess);
  CHECK(t.cls == TopoClass::Unknown);
  CHECK(contains(t.reason, "node spark-2 has neither an active RDMA port nor an IPv4 interface"));
}

TEST_CASE("down ports do not link nodes") {
  CommTopo t = classifyFile("spark-2node-direct.yaml");
  for (NicInfo& n : t.ranks[1].nics) n.ports[0].state = "DOWN";
  t.ranks[1].netifs.clear();
  REQUIRE(topoClassify(&t) == rcnSuccess);
  CHECK(t.cls == TopoClass::Unknown);
}

TEST_CASE("one host name with two boot ids is two machines") {
  CommTopo t = classifyFile("spark-2node-direct.yaml");
  t.ranks[1].host = "spark-1";  // a cloned image
  REQUIRE(topoClassify(&t) == rcnSuccess);
  CHECK(t.nnodes == 2);
  CHECK(t.nodeNames == std::vector<std::string>{"spark-1", "spark-1#2"});
}

TEST_CASE("a rank without a GPU on one host: p2p not eligible") {
  CommTopo t = classifyFile("nvlink-host-8gpu.yaml");
  t.ranks[3].cudaDev = -1;
  REQUIRE(topoClassify(&t) == rcnSuccess);
  CHECK(t.cls == TopoClass::SingleHost);
  CHECK_FALSE(t.p2pEligible);
  CHECK(contains(t.reason, "rank 3 has no GPU"));
}
