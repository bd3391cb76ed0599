// SPDX-License-Identifier: BSD-3-Clause
// Device and GID selection on a fake 4-node DGX Spark fabric: each node's
// ConnectX-7 port is two PCIe functions (rocep1s0f0/1), a second port has
// only link-local GIDs, and an InfiniBand port sits beside them. The IPv4
// GIDs live on a macvlan netdev whose subnet is the node's own (it reaches
// no peer), a VLAN netdev and a plain netdev (both shared by every node).
// The selection runs once per node against that node's sysfs and the
// fabric's agreed topology, and every chosen GID must reach every peer.
#include <catch2/catch_test_macros.hpp>

#if ROCENANTE_HAVE_IBVERBS

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/scoped_env.h"
#include "topology/topology.h"
#include "transport/wire/verbs_api.h"
#include "transport/wire/verbs_device.h"
#include "transport/wire/verbs_select.h"
#include "verbs_mock_scope.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kNodes = 4;

// One GID of the fabric: its index, address text, netdev and prefix.
struct FabricGid {
  int index;
  std::string address;  // "10.100.0.2" or "2001:db8::2"
  std::string netdev;
  int prefix;
  std::string type;
};

std::string sysfsGid(const std::string& address) {
  uint8_t bytes[16] = {};
  if (inet_pton(AF_INET, address.c_str(), bytes + 12) == 1) bytes[10] = bytes[11] = 0xff;
  else REQUIRE(inet_pton(AF_INET6, address.c_str(), bytes) == 1);
  char text[40];
  std::snprintf(text, sizeof text, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10],
                bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return text;
}

// The GIDs of node n (1-based) on rocep1s0f0 port 1: link-local, then the
// macvlan's node-local subnet (first, so a selection blind to reach takes
// it), then the VLAN's shared one, then IPv6: a node-local /64, a shared one.
std::vector<FabricGid> firstFunctionGids(int n) {
  const std::string node = std::to_string(n);
  return {{0, "fe80::202:c9ff:fe00:" + node, "enp1s0f0np0", 64, "IB/RoCE v1"},
          {1, "fe80::202:c9ff:fe00:" + node, "enp1s0f0np0", 64, "RoCE v2"},
          {2, "172.16." + node + ".1", "mv0", 24, "IB/RoCE v1"},
          {3, "172.16." + node + ".1", "mv0", 24, "RoCE v2"},
          {4, "10.100.0." + node, "enp1s0f0np0.100", 24, "IB/RoCE v1"},
          {5, "10.100.0." + node, "enp1s0f0np0.100", 24, "RoCE v2"},
          {6, "2001:db8:" + node + "::1", "mv0", 64, "RoCE v2"},
          {7, "fd00:100::" + node, "enp1s0f0np0.100", 64, "RoCE v2"}};
}

// rocep1s0f1 port 1: the plain netdev's shared subnet.
std::vector<FabricGid> secondFunctionGids(int n) {
  const std::string node = std::to_string(n);
  return {{0, "fe80::202:c9ff:fe01:" + node, "enp1s0f1np1", 64, "IB/RoCE v1"},
          {1, "fe80::202:c9ff:fe01:" + node, "enp1s0f1np1", 64, "RoCE v2"},
          {2, "192.168.100." + node, "enp1s0f1np1", 24, "IB/RoCE v1"},
          {3, "192.168.100." + node, "enp1s0f1np1", 24, "RoCE v2"}};
}

// roceP2p1s0f0 port 1: link-local only.
std::vector<FabricGid> linkLocalGids(int n) {
  const std::string node = std::to_string(n);
  return {{0, "fe80::202:c9ff:fe02:" + node, "enP2p1s0f0np0", 64, "IB/RoCE v1"},
          {1, "fe80::202:c9ff:fe02:" + node, "enP2p1s0f0np0", 64, "RoCE v2"}};
}

struct FabricPort {
  std::string device;
  bool infiniband;
  std::vector<FabricGid> gids;
};

std::vector<FabricPort> nodePorts(int n) {
  return {{"rocep1s0f0", false, firstFunctionGids(n)},
          {"rocep1s0f1", false, secondFunctionGids(n)},
          {"roceP2p1s0f0", false, linkLocalGids(n)},
          {"ibp1s0", true, {}}};
}

std::vector<MockDevice> nodeDevices() {
  std::vector<MockDevice> devices;
  for (const FabricPort& port : nodePorts(1)) {
    MockPort mockPort;
    if (port.infiniband) mockPort.linkLayer = IBV_LINK_LAYER_INFINIBAND;
    devices.push_back({port.device, {mockPort}});
  }
  return devices;
}

// The agreed topology of the fabric, as the probe would gather it.
CommTopo fabricTopo() {
  CommTopo topo;
  for (int n = 1; n <= kNodes; ++n) {
    RankTopo rank;
    rank.rank = n - 1;
    rank.host = "spark-" + std::to_string(n);
    for (const FabricPort& fp : nodePorts(n)) {
      NicInfo nic;
      nic.name = fp.device;
      PortInfo port;
      port.port = 1;
      port.state = "ACTIVE";
      port.linkLayer = fp.infiniband ? "InfiniBand" : "Ethernet";
      port.netdev = fp.gids.empty() ? "" : fp.gids[0].netdev;
      for (const FabricGid& g : fp.gids) {
        GidInfo info;
        info.index = g.index;
        info.gid = sysfsGid(g.address);
        info.type = g.type;
        info.netdev = g.netdev;
        if (g.address.find(':') == std::string::npos)
          REQUIRE(parseIpv4Net(g.address + "/" + std::to_string(g.prefix), &info.ipv4));
        port.gids.push_back(info);
      }
      nic.ports.push_back(port);
      rank.nics.push_back(nic);
    }
    topo.ranks.push_back(rank);
    topo.nodeOfRank.push_back(n - 1);
  }
  return topo;
}

// Node n's sysfs, the mock NIC with its devices, and the selection's environment.
struct NodeScope {
  MockScope mock{{}, nodeDevices()};
  FakeSysfs sysfs;
  explicit NodeScope(int n) {
    for (const FabricPort& port : nodePorts(n))
      for (const FabricGid& g : port.gids) sysfs.addGid(port.device, 1, g.index, sysfsGid(g.address), g.type);
    setVerbsSysfsRootForTest(sysfs.root().c_str());
  }
};

std::vector<VerbsPort> openOnNode(const GidReach* reach, std::string* why) {
  std::vector<VerbsPort> ports;
  VerbsPortQuery query;
  query.reach = reach;
  openVerbsPorts(&ports, why, query);
  for (VerbsPort& port : ports) verbsApi().closeDevice(port.context);
  return ports;
}

// The chosen GID's address on node n, as the fabric defines it.
const FabricGid& chosenGid(int n, const VerbsPort& port) {
  static std::vector<FabricPort> ports;
  ports = nodePorts(n);
  for (const FabricPort& fp : ports)
    if (fp.device == port.device)
      for (const FabricGid& g : fp.gids)
        if (g.index == port.gidIndex) return g;
  FAIL("no GID " << port.gidIndex << " on " << port.device);
  return ports[0].gids[0];
}

// Whether some GID of node m on any RoCE port shares address/prefix's subnet
// (checked here from the fabric's own definition, not the library's code).
bool nodeHasAddressIn(int m, const FabricGid& g) {
  const bool v4 = g.address.find(':') == std::string::npos;
  uint8_t mine[16] = {};
  REQUIRE(inet_pton(v4 ? AF_INET : AF_INET6, g.address.c_str(), mine) == 1);
  const int bytes = g.prefix / 8;  // every prefix of this fabric is whole bytes
  for (const FabricPort& fp : nodePorts(m))
    for (const FabricGid& theirs : fp.gids) {
      if ((theirs.address.find(':') == std::string::npos) != v4 || theirs.address.rfind("fe80", 0) == 0) continue;
      uint8_t other[16] = {};
      REQUIRE(inet_pton(v4 ? AF_INET : AF_INET6, theirs.address.c_str(), other) == 1);
      if (std::equal(mine, mine + bytes, other)) return true;
    }
  return false;
}

void requireReachesEveryPeer(int n, const VerbsPort& port) {
  const FabricGid& g = chosenGid(n, port);
  INFO("node " << n << " " << port.device << " GID " << port.gidIndex << " " << g.address);
  for (int m = 1; m <= kNodes; ++m)
    if (m != n) CHECK(nodeHasAddressIn(m, g));
}

void clearGidEnv() {
  for (const char* name : {"ROCENANTE_IB_ADDR_FAMILY", "NCCL_IB_ADDR_FAMILY", "ROCENANTE_IB_ADDR_RANGE",
                           "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM"})
    unsetenv(name);
}

}  // namespace

TEST_CASE("spark fabric: a two-function HCA list opens both, each on a GID that reaches every peer", "[verbs]") {
  clearGidEnv();
  const CommTopo topo = fabricTopo();
  for (int n = 1; n <= kNodes; ++n) {
    NodeScope node(n);
    ScopedEnv hca("NCCL_IB_HCA", "rocep1s0f0,rocep1s0f1");
    const GidReach reach = gidReachFromTopo(topo, n - 1);
    std::string why;
    const std::vector<VerbsPort> ports = openOnNode(&reach, &why);
    INFO(why);
    REQUIRE(ports.size() == 2);
    CHECK(ports[0].device == "rocep1s0f0");
    CHECK(ports[0].gidIndex == 5);  // the VLAN's, past the macvlan's node-local GID 3
    CHECK(ports[1].device == "rocep1s0f1");
    CHECK(ports[1].gidIndex == 3);  // the plain netdev's
    for (const VerbsPort& port : ports) requireReachesEveryPeer(n, port);
  }
}

TEST_CASE("spark fabric: without the topology the first policy GID is taken, even one that reaches nobody", "[verbs]") {
  clearGidEnv();
  NodeScope node(1);
  ScopedEnv hca("NCCL_IB_HCA", "rocep1s0f0");
  std::string why;
  const std::vector<VerbsPort> ports = openOnNode(nullptr, &why);
  REQUIRE(ports.size() == 1);
  CHECK(ports[0].gidIndex == 3);  // the macvlan's: why the reach check exists
  CHECK_FALSE(nodeHasAddressIn(2, chosenGid(1, ports[0])));
}

TEST_CASE("spark fabric: IPv6 GIDs are judged by their /64", "[verbs]") {
  clearGidEnv();
  const CommTopo topo = fabricTopo();
  ScopedEnv family("NCCL_IB_ADDR_FAMILY", "AF_INET6");
  for (int n = 1; n <= kNodes; ++n) {
    NodeScope node(n);
    ScopedEnv hca("NCCL_IB_HCA", "rocep1s0f0");
    const GidReach reach = gidReachFromTopo(topo, n - 1);
    std::string why;
    const std::vector<VerbsPort> ports = openOnNode(&reach, &why);
    INFO(why);
    REQUIRE(ports.size() == 1);
    CHECK(ports[0].gidIndex == 7);  // fd00:100::/64, past the node-local 2001:db8:n::/64
    requireReachesEveryPeer(n, ports[0]);
  }
}

TEST_CASE("spark fabric: the link-local port is passed over and a GID reaching no peer is named", "[verbs]") {
  clearGidEnv();
  const CommTopo topo = fabricTopo();
  NodeScope node(2);
  const GidReach reach = gidReachFromTopo(topo, 1);
  std::string why;
  {
    ScopedEnv hca("NCCL_IB_HCA", "roceP2p1s0f0");
    CHECK(openOnNode(&reach, &why).empty());
    CHECK(why.find("link-local ones never count") != std::string::npos);
    CHECK(why.find("roceP2p1s0f0:1") != std::string::npos);
  }
  {
    // Only the macvlan's range is allowed: its GID misses every peer, and the error says so.
    ScopedEnv hca("NCCL_IB_HCA", "rocep1s0f0");
    ScopedEnv range("NCCL_IB_ADDR_RANGE", "172.16.0.0/16");
    CHECK(openOnNode(&reach, &why).empty());
    INFO(why);
    CHECK(why.find("GID 3 (172.16.2.1/24) of rocep1s0f0:1 does not reach rank 0's subnets") != std::string::npos);
  }
  {
    // An explicit GID index is taken as given.
    ScopedEnv hca("NCCL_IB_HCA", "rocep1s0f0");
    ScopedEnv index("NCCL_IB_GID_INDEX", "3");
    const std::vector<VerbsPort> ports = openOnNode(&reach, &why);
    REQUIRE(ports.size() == 1);
    CHECK(ports[0].gidIndex == 3);
  }
}

TEST_CASE("spark fabric: the InfiniBand port routes by LID, and peers on the same host are not judged", "[verbs]") {
  clearGidEnv();
  CommTopo topo = fabricTopo();
  NodeScope node(3);
  std::string why;
  {
    ScopedEnv hca("NCCL_IB_HCA", "ibp1s0");
    const GidReach reach = gidReachFromTopo(topo, 2);
    const std::vector<VerbsPort> ports = openOnNode(&reach, &why);
    REQUIRE(ports.size() == 1);
    CHECK(ports[0].attr.link_layer == IBV_LINK_LAYER_INFINIBAND);
    CHECK(ports[0].gidIndex == 0);
  }
  // Every rank on one host: nothing to reach, so the macvlan's GID is as good as any.
  for (int& node : topo.nodeOfRank) node = 0;
  const GidReach reach = gidReachFromTopo(topo, 2);
  CHECK(reach.peers.empty());
  ScopedEnv hca("NCCL_IB_HCA", "rocep1s0f0");
  const std::vector<VerbsPort> ports = openOnNode(&reach, &why);
  REQUIRE(ports.size() == 1);
  CHECK(ports[0].gidIndex == 3);
}

#else

TEST_CASE("spark fabric: skipped without libibverbs's header", "[verbs]") { SUCCEED("built without ibverbs"); }

#endif  // ROCENANTE_HAVE_IBVERBS
