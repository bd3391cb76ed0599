// SPDX-License-Identifier: BSD-3-Clause
// Where the proxy path puts its exchange regions (region_placement.h), from
// made-up topologies: GPU memory only when every rank's GPU can take
// GPUDirect RDMA writes over the verbs wire, each rank registering through
// dma-buf or peermem as it can; ROCENANTE_GDR=1 failing with the reason.
#include <catch2/catch_test_macros.hpp>

#include "support/scoped_env.h"
#include "transport/proxy/region_placement.h"

using namespace rcn;

namespace {

// A node with one discrete GPU that has everything GPUDirect needs.
RankTopo capableRank(int rank) {
  RankTopo r;
  r.rank = rank;
  r.cudaDev = 0;
  GpuInfo g;
  g.index = 0;
  g.gdr = Support::Yes;
  g.dmaBuf = Support::Yes;
  g.nearestNic = "mlx5_0";
  g.nicDistance = PciDistance::Pix;
  r.gpus.push_back(g);
  return r;
}

CommTopo twoCapableNodes() {
  CommTopo t;
  t.ranks = {capableRank(0), capableRank(1)};
  return t;
}

// dmabufBuild: every rank's libibverbs can register a dma-buf.
RegionPlacement place(const CommTopo* topo, WireKind wire, GdrMode mode, bool dmabufBuild = true,
                      rcnResult_t want = rcnSuccess) {
  RegionPlacement p;
  const std::vector<uint8_t> dmabufByRank(topo ? topo->ranks.size() : 0, dmabufBuild ? 1 : 0);
  CHECK(chooseRegionPlacement(topo, 0, wire, mode, dmabufByRank, &p) == want);
  return p;
}

}  // namespace

TEST_CASE("GPU memory over verbs when every rank can take GPUDirect writes", "[gdr]") {
  CommTopo t = twoCapableNodes();
  RegionPlacement p = place(&t, WireKind::Verbs, GdrMode::Auto);
  CHECK(p.device);
  CHECK(p.dmabuf);
  // Without dma-buf (old driver or old rdma-core), nvidia-peermem will do.
  t.ranks[0].gpus[0].dmaBuf = Support::No;
  t.ranks[0].peerMemModule = "nvidia_peermem";
  p = place(&t, WireKind::Verbs, GdrMode::Auto);
  CHECK(p.device);
  CHECK_FALSE(p.dmabuf);
  t = twoCapableNodes();
  for (RankTopo& r : t.ranks) r.peerMemModule = "nv_peer_mem";
  p = place(&t, WireKind::Verbs, GdrMode::Auto, /*dmabufBuild=*/false);
  CHECK(p.device);
  CHECK_FALSE(p.dmabuf);
}

TEST_CASE("each rank is judged by its own host's rdma-core", "[gdr]") {
  CommTopo t = twoCapableNodes();  // dma-buf GPUs, no peermem module anywhere
  RegionPlacement p;
  // Rank 1's libibverbs predates ibv_reg_dmabuf_mr: every rank, rank 0 included, sees it.
  REQUIRE(chooseRegionPlacement(&t, 0, WireKind::Verbs, GdrMode::Auto, {1, 0}, &p) == rcnSuccess);
  CHECK_FALSE(p.device);
  CHECK(p.why.find("rank 1 has neither dma-buf registration nor nvidia-peermem") != std::string::npos);
  REQUIRE(chooseRegionPlacement(&t, 1, WireKind::Verbs, GdrMode::Auto, {1, 0}, &p) == rcnSuccess);
  CHECK_FALSE(p.device);
  // With peermem on rank 1, both take GPU memory, rank 1 registering through peermem.
  t.ranks[1].peerMemModule = "nvidia_peermem";
  REQUIRE(chooseRegionPlacement(&t, 1, WireKind::Verbs, GdrMode::Auto, {1, 0}, &p) == rcnSuccess);
  CHECK(p.device);
  CHECK_FALSE(p.dmabuf);
  REQUIRE(chooseRegionPlacement(&t, 0, WireKind::Verbs, GdrMode::Auto, {1, 0}, &p) == rcnSuccess);
  CHECK(p.device);
  CHECK(p.dmabuf);
}

TEST_CASE("auto judges GPUDirect RDMA by the NIC each rank opens, not only the nearest", "[gdr]") {
  CommTopo t = twoCapableNodes();  // each GPU's nearest NIC is mlx5_0, PIX
  RegionPlacement p;
  REQUIRE(chooseRegionPlacement(&t, 0, WireKind::Verbs, GdrMode::Auto, {1, 1}, &p, {"mlx5_0", "mlx5_0"}) == rcnSuccess);
  CHECK(p.device);
  // Rank 1's HCA list made its wire open mlx5_2, whose distance the topology does not know.
  REQUIRE(chooseRegionPlacement(&t, 0, WireKind::Verbs, GdrMode::Auto, {1, 1}, &p, {"mlx5_0", "mlx5_2"}) == rcnSuccess);
  CHECK_FALSE(p.device);
  CHECK(p.why.find("rank 1 opens mlx5_2, not its GPU's nearest NIC mlx5_0") != std::string::npos);
  // ROCENANTE_GDR=1 asks for GPU memory whatever the distance.
  REQUIRE(chooseRegionPlacement(&t, 0, WireKind::Verbs, GdrMode::On, {1, 1}, &p, {"mlx5_0", "mlx5_2"}) == rcnSuccess);
  CHECK(p.device);
}

TEST_CASE("pinned host memory when any rank cannot, naming it", "[gdr]") {
  CommTopo t = twoCapableNodes();
  t.ranks[1].gpus[0].integrated = true;  // DGX Spark's GB10
  RegionPlacement p = place(&t, WireKind::Verbs, GdrMode::Auto);
  CHECK_FALSE(p.device);
  CHECK(p.why.find("rank 1") != std::string::npos);
  CHECK(p.why.find("integrated") != std::string::npos);

  t = twoCapableNodes();
  t.ranks[1].gpus[0].gdr = Support::Unknown;
  CHECK_FALSE(place(&t, WireKind::Verbs, GdrMode::Auto).device);

  t = twoCapableNodes();
  t.ranks[1].gpus[0].dmaBuf = Support::No;  // and no peermem module
  p = place(&t, WireKind::Verbs, GdrMode::Auto);
  CHECK_FALSE(p.device);
  CHECK(p.why.find("nvidia-peermem") != std::string::npos);
  CHECK_FALSE(place(&t, WireKind::Verbs, GdrMode::Auto, /*dmabufBuild=*/false).device);

  // Auto wants the NIC under the GPU's PCIe switch; 1 takes it anyway.
  t = twoCapableNodes();
  t.ranks[0].gpus[0].nicDistance = PciDistance::Sys;
  p = place(&t, WireKind::Verbs, GdrMode::Auto);
  CHECK_FALSE(p.device);
  CHECK(p.why.find("SYS") != std::string::npos);
  CHECK(place(&t, WireKind::Verbs, GdrMode::On).device);

  CHECK_FALSE(place(nullptr, WireKind::Verbs, GdrMode::Auto).device);
}

TEST_CASE("the wire and ROCENANTE_GDR decide first", "[gdr]") {
  CommTopo t = twoCapableNodes();
  CHECK_FALSE(place(&t, WireKind::Shm, GdrMode::Auto).device);
  CHECK_FALSE(place(&t, WireKind::Tcp, GdrMode::Auto).device);
  CHECK_FALSE(place(&t, WireKind::Verbs, GdrMode::Off).device);
  // The cuda wire exists to run the GPU-memory protocol: always GPU memory,
  // never registered with a NIC.
  RegionPlacement p = place(nullptr, WireKind::Cuda, GdrMode::Auto);
  CHECK(p.device);
  CHECK_FALSE(p.dmabuf);
}

TEST_CASE("ROCENANTE_GDR=1 fails with the reason when GPU memory cannot be used", "[gdr]") {
  CommTopo t = twoCapableNodes();
  t.ranks[1].gpus[0].integrated = true;
  RegionPlacement p = place(&t, WireKind::Verbs, GdrMode::On, true, rcnInvalidUsage);
  CHECK(p.why.find("ROCENANTE_GDR=1") != std::string::npos);
  CHECK(p.why.find("rank 1") != std::string::npos);
  p = place(&t, WireKind::Shm, GdrMode::On, true, rcnInvalidUsage);
  CHECK(p.why.find("CPU") != std::string::npos);
}

TEST_CASE("ROCENANTE_GDR accepts auto, 0 and 1 only", "[gdr]") {
  GdrMode mode;
  {
    rcn::test::ScopedEnv gdr("ROCENANTE_GDR", "1");
    CHECK(gdrModeFromParams(&mode) == rcnSuccess);
    CHECK(mode == GdrMode::On);
  }
  {
    rcn::test::ScopedEnv gdr("ROCENANTE_GDR", "0");
    CHECK(gdrModeFromParams(&mode) == rcnSuccess);
    CHECK(mode == GdrMode::Off);
  }
  {
    rcn::test::ScopedEnv gdr("ROCENANTE_GDR", "yes please");
    CHECK(gdrModeFromParams(&mode) == rcnInvalidArgument);
  }
  rcn::test::ScopedEnv gdr("ROCENANTE_GDR", nullptr);
  CHECK(gdrModeFromParams(&mode) == rcnSuccess);
  CHECK(mode == GdrMode::Auto);
}
