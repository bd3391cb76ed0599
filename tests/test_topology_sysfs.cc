// SPDX-License-Identifier: BSD-3-Clause
// Discovery against fixture sysfs trees of real layouts (tests/fixtures/topology/sysfs).
#include <catch2/catch_test_macros.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "test_topology_support.h"
#include "topology/locality.h"
#include "topology/sysfs.h"

using namespace rcn;

namespace {

RankTopo probeTree(const std::string& tree) {
  TopoProbeOptions opt;
  opt.root = topotest::fixture("sysfs/" + tree);
  opt.useCuda = false;
  RankTopo t;
  REQUIRE(topoProbeLocal(opt, 0, &t) == rcnSuccess);
  return t;
}

const NicInfo& nicNamed(const RankTopo& t, const std::string& name) {
  for (const NicInfo& n : t.nics)
    if (n.name == name) return n;
  FAIL("no NIC " << name);
  return t.nics.front();
}

GpuInfo gpuAt(int index, const std::string& busId) {
  GpuInfo g;
  g.index = index;
  g.pciBusId = busId;
  return g;
}

NicInfo nicAt(const std::string& name, const std::string& busId, bool active) {
  NicInfo n;
  n.name = name;
  n.pciBusId = busId;
  PortInfo p;
  p.state = active ? "ACTIVE" : "DOWN";
  n.ports.push_back(p);
  return n;
}

// The two-socket host of fixtures/topology/hwloc/two-socket.xml.
RankTopo twoSocketHost(bool nic0Active) {
  RankTopo t;
  t.gpus = {gpuAt(0, "0000:03:00.0"), gpuAt(1, "0000:83:00.0")};
  t.nics = {nicAt("mlx5_0", "0000:10:00.0", nic0Active), nicAt("mlx5_1", "0000:84:00.0", true)};
  return t;
}

}  // namespace

TEST_CASE("DGX Spark: four PCIe functions, RoCE v2 GIDs on separate subnets") {
  RankTopo t = probeTree("spark");
  CHECK(t.host == "spark-1");
  CHECK(t.bootId == "0b7c3f5e-1d2a-4c8e-9f10-5a6b7c8d9e01");
  CHECK(t.peerMemModule.empty());
  REQUIRE(t.nics.size() == 4);
  const NicInfo& f0 = nicNamed(t, "rocep1s0f0");
  CHECK(f0.pciBusId == "0000:01:00.0");
  REQUIRE(f0.ports.size() == 1);
  const PortInfo& p = f0.ports[0];
  CHECK(p.state == "ACTIVE");
  CHECK(p.linkLayer == "Ethernet");
  CHECK(p.netdev == "enp1s0f0np0");
  CHECK(p.mtu == 4096);  // netdev MTU 9000 -> largest RoCE MTU
  REQUIRE(p.gids.size() == 4);  // zero entries skipped
  CHECK(p.gids[3].isRoceV2());
  CHECK(p.gids[3].ipv4.text() == "192.168.100.1/24");
  CHECK_FALSE(p.gids[1].ipv4.valid());  // link-local GID: no IPv4
  CHECK(nicNamed(t, "roceP2p1s0f0").pciBusId == "0002:01:00.0");
  CHECK(nicNamed(t, "rocep1s0f1").ports[0].state == "DOWN");
  // Down ports and link-local GIDs do not count; the two cabled functions do.
  CHECK(rdmaSubnets(t) == std::vector<std::string>{"192.168.100.0/24", "192.168.101.0/24"});
  CHECK(t.netifs.size() == 3);
}

TEST_CASE("DGX Spark: the GB10 sits on its own PCIe root, so every NIC is SYS") {
  TopoProbeOptions opt;
  opt.root = topotest::fixture("sysfs/spark");
  RankTopo t = probeTree("spark");
  GpuInfo gb10;
  gb10.index = 0;
  gb10.pciBusId = "000f:01:00.0";
  gb10.integrated = true;
  t.gpus = {gb10};
  REQUIRE(discoverLocality(opt, &t) == rcnSuccess);
  CHECK(t.gpus[0].nicDistance == PciDistance::Sys);
  CHECK(t.gpus[0].nearestNic == "roceP2p1s0f0");  // the first in name order at equal distance
}

// One InfiniBand fabric is one subnet prefix however its GIDs are spelled (a
// topology file may shorten them or write capitals); a GID that is not an
// IPv6 address names no fabric.
TEST_CASE("InfiniBand subnets come from the GID's first 64 bits, not its text") {
  RankTopo t;
  NicInfo nic;
  PortInfo port;
  port.state = "ACTIVE";
  port.linkLayer = "InfiniBand";
  for (const char* gid : {"fe80:0000:0000:0000:248a:0703:0049:abcd", "fe80::248a:703:49:ef01",
                          "FE80::248A:703:49:1234", "", "not-a-gid"}) {
    GidInfo g;
    g.gid = gid;
    port.gids.push_back(g);
  }
  nic.ports = {port};
  t.nics = {nic};
  CHECK(rdmaSubnets(t) == std::vector<std::string>{"ib:fe80:0000:0000:0000"});
}

TEST_CASE("multi-GPU host: InfiniBand ports, peer-memory module, GPU-to-NIC locality") {
  TopoProbeOptions opt;
  opt.root = topotest::fixture("sysfs/nvlink-host");
  RankTopo t = probeTree("nvlink-host");
  CHECK(t.peerMemModule == "nvidia_peermem");
  REQUIRE(t.nics.size() == 3);
  CHECK(t.nics[0].ports[0].linkLayer == "InfiniBand");
  CHECK(rdmaSubnets(t) == std::vector<std::string>{"ib:fe80:0000:0000:0000"});
  const char* buses[] = {"0000:03:00.0", "0000:13:00.0", "0000:85:00.0", "0000:91:00.0"};
  for (int i = 0; i < 4; i++) {
    GpuInfo g;
    g.index = i;
    g.pciBusId = buses[i];
    t.gpus.push_back(g);
  }
  REQUIRE(discoverLocality(opt, &t) == rcnSuccess);
  CHECK(t.gpus[0].nearestNic == "mlx5_0");
  CHECK(t.gpus[0].nicDistance == PciDistance::Pix);
  CHECK(t.gpus[1].nearestNic == "mlx5_1");
  CHECK(t.gpus[1].nicDistance == PciDistance::Pix);
  CHECK(t.gpus[2].nearestNic == "mlx5_2");
  CHECK(t.gpus[2].nicDistance == PciDistance::Pxb);
  CHECK(t.gpus[3].nearestNic == "mlx5_2");
  CHECK(t.gpus[3].nicDistance == PciDistance::Phb);
}

TEST_CASE("hwloc locality: two sockets, 2 GPUs and 2 NICs") {
  if (!hwlocAvailable()) SKIP("built without hwloc");
  std::string xml = topotest::fixture("hwloc/two-socket.xml");
  RankTopo t = twoSocketHost(true);
  REQUIRE(discoverLocalityHwloc(xml, &t) == rcnSuccess);
  CHECK(t.gpus[0].nearestNic == "mlx5_0");  // other root port of the same host bridge
  CHECK(t.gpus[0].nicDistance == PciDistance::Phb);
  CHECK(t.gpus[1].nearestNic == "mlx5_1");  // one switch
  CHECK(t.gpus[1].nicDistance == PciDistance::Pix);

  // With its own NIC down, GPU0 has to cross to the other socket.
  RankTopo down = twoSocketHost(false);
  REQUIRE(discoverLocalityHwloc(xml, &down) == rcnSuccess);
  CHECK(down.gpus[0].nearestNic == "mlx5_1");
  CHECK(down.gpus[0].nicDistance == PciDistance::Sys);
}

TEST_CASE("hwloc locality agrees with the sysfs reader on the multi-GPU host") {
  if (!hwlocAvailable()) SKIP("built without hwloc");
  TopoProbeOptions opt;
  opt.root = topotest::fixture("sysfs/nvlink-host");
  RankTopo viaSysfs = probeTree("nvlink-host");
  const char* buses[] = {"0000:03:00.0", "0000:13:00.0", "0000:85:00.0", "0000:91:00.0"};
  for (int i = 0; i < 4; i++) viaSysfs.gpus.push_back(gpuAt(i, buses[i]));
  RankTopo viaHwloc = viaSysfs;
  REQUIRE(discoverLocality(opt, &viaSysfs) == rcnSuccess);
  REQUIRE(discoverLocalityHwloc(topotest::fixture("hwloc/nvlink-host.xml"), &viaHwloc) == rcnSuccess);
  for (int i = 0; i < 4; i++) {
    INFO("GPU " << i);
    CHECK(viaHwloc.gpus[i].nearestNic == viaSysfs.gpus[i].nearestNic);
    CHECK(viaHwloc.gpus[i].nicDistance == viaSysfs.gpus[i].nicDistance);
  }
  CHECK(viaHwloc.gpus[2].nicDistance == PciDistance::Pxb);
  CHECK(viaHwloc.gpus[3].nicDistance == PciDistance::Phb);
}

TEST_CASE("hwloc locality refuses, leaving the result alone, when it cannot answer") {
  RankTopo t = twoSocketHost(true);
  t.gpus[1].pciBusId = "0000:c1:00.0";  // not in the XML: the sysfs reader must answer instead
  t.gpus[0].nearestNic = "untouched";
  CHECK(discoverLocalityHwloc(topotest::fixture("hwloc/two-socket.xml"), &t) == rcnSystemError);
  CHECK(t.gpus[0].nearestNic == "untouched");
  CHECK(discoverLocalityHwloc(topotest::fixture("hwloc/no-such-file.xml"), &t) == rcnSystemError);
  CHECK(t.gpus[0].nearestNic == "untouched");
  t.gpus[1].pciBusId = "ffff:ff:1f.7";  // this machine (live hwloc) has no such device either
  CHECK(discoverLocalityHwloc("", &t) == rcnSystemError);
  CHECK(t.gpus[0].nearestNic == "untouched");
}

TEST_CASE("a machine without RDMA devices or GPUs probes cleanly") {
  RankTopo t = probeTree("no-hardware");
  CHECK(t.host == "laptop");
  CHECK(t.nics.empty());
  CHECK(t.gpus.empty());
  CHECK(rdmaSubnets(t).empty());
  std::string table = topoLocalTable(t);
  CHECK(table.find("GPUs: none found") != std::string::npos);
  CHECK(table.find("RDMA devices: none found") != std::string::npos);
}

TEST_CASE("a missing root probes as an empty machine, not an error") {
  TopoProbeOptions opt;
  opt.root = "/nonexistent/rocenante-topology-root";
  opt.useCuda = false;
  RankTopo t;
  REQUIRE(topoProbeLocal(opt, 0, &t) == rcnSuccess);
  CHECK(t.nics.empty());
  CHECK(t.host == "unknown-host");
}

TEST_CASE("probing this machine never fails, with or without GPUs and NICs") {
  TopoProbeOptions opt;  // the real root; cudart fails gracefully without a driver
  RankTopo t;
  REQUIRE(topoProbeLocal(opt, 0, &t) == rcnSuccess);
  CHECK_FALSE(t.host.empty());
  CHECK_FALSE(topoLocalTable(t).empty());
}

TEST_CASE("IPv4 subnet helpers") {
  Ipv4Net n;
  REQUIRE(parseIpv4Net("10.0.3.17/24", &n));
  CHECK(n.subnetText() == "10.0.3.0/24");
  CHECK(n.text() == "10.0.3.17/24");
  REQUIRE(parseIpv4Net("172.16.5.4/12", &n));
  CHECK(n.subnetText() == "172.16.0.0/12");
  CHECK_FALSE(parseIpv4Net("10.0.0.1/33", &n));
  CHECK_FALSE(parseIpv4Net("10.0.0/24", &n));
  CHECK_FALSE(parseIpv4Net("", &n));
}

TEST_CASE("a root whose files are a FIFO or /dev/zero probes without hanging or filling memory") {
  // rocenante-probe --root reads any tree: a FIFO no one writes blocked the
  // open, /dev/zero was read for ever. Both now read as absent files.
  char root[] = "/tmp/rcn-probe-root-XXXXXX";
  REQUIRE(mkdtemp(root) != nullptr);
  const std::string dir = root;
  REQUIRE(system(("mkdir -p " + dir + "/etc " + dir + "/proc/sys/kernel/random").c_str()) == 0);
  REQUIRE(mkfifo((dir + "/etc/hostname").c_str(), 0600) == 0);
  REQUIRE(symlink("/dev/zero", (dir + "/proc/sys/kernel/random/boot_id").c_str()) == 0);
  REQUIRE(symlink("/dev/zero", (dir + "/proc/modules").c_str()) == 0);
  std::string text;
  CHECK_FALSE(readFirstLine(dir + "/etc/hostname", &text));
  CHECK_FALSE(readWholeFile(dir + "/proc/modules", &text));
  TopoProbeOptions opt;
  opt.root = dir;
  opt.useCuda = false;
  RankTopo t;
  CHECK(topoProbeLocal(opt, 0, &t) == rcnSuccess);
  CHECK(t.host == "unknown-host");
  CHECK(t.bootId.empty());
  REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}
