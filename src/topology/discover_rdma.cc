// SPDX-License-Identifier: BSD-3-Clause
// RDMA devices: sysfs gives devices, ports, GIDs with their RoCE version and
// netdev (the same files NCCL and rdma-core read); on the real machine,
// libibverbs (where built in and loadable) confirms each port's state, link
// layer and active MTU. IPv4-mapped GIDs get the prefix of their netdev's address.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "topology/sysfs.h"
#include "topology/topology.h"

#ifdef ROCENANTE_HAVE_IBVERBS
#include "transport/wire/verbs_api.h"
#endif

namespace rcn {

// "4: ACTIVE" -> "ACTIVE"
static std::string portState(const std::string& text) {
  size_t colon = text.find(':');
  return trim(colon == std::string::npos ? text : text.substr(colon + 1));
}

static bool allZeroGid(const std::string& gid) {
  return gid.find_first_not_of("0:") == std::string::npos;
}

// An IPv4-mapped GID (::ffff:a.b.c.d) carries the address in its last 32 bits.
static bool gidIpv4(const std::string& gidText, uint32_t* addr) {
  in6_addr a{};
  if (inet_pton(AF_INET6, gidText.c_str(), &a) != 1) return false;
  for (int i = 0; i < 10; i++)
    if (a.s6_addr[i] != 0) return false;
  if (a.s6_addr[10] != 0xff || a.s6_addr[11] != 0xff) return false;
  *addr = (uint32_t(a.s6_addr[12]) << 24) | (uint32_t(a.s6_addr[13]) << 16) |
          (uint32_t(a.s6_addr[14]) << 8) | a.s6_addr[15];
  return true;
}

static int prefixOf(const std::vector<NetIf>& netifs, const std::string& netdev, uint32_t addr) {
  for (const NetIf& n : netifs)
    if (n.ipv4.addr == addr && (netdev.empty() || n.name == netdev)) return n.ipv4.prefix;
  for (const NetIf& n : netifs)
    if (n.ipv4.addr == addr) return n.ipv4.prefix;
  return 0;
}

// The RoCE MTU is the largest IB MTU that fits the Ethernet MTU.
static int roceMtuOf(int ethMtu) {
  int best = 0;
  for (int m : {256, 512, 1024, 2048, 4096})
    if (m <= ethMtu) best = m;
  return best;
}

static void readGids(const std::string& portDir, const std::vector<NetIf>& netifs, PortInfo* port) {
  for (const std::string& idx : listDir(joinPath(portDir, "gids"))) {
    GidInfo g;
    g.index = atoi(idx.c_str());
    if (!readFirstLine(joinPath(portDir, "gids/" + idx), &g.gid) || allZeroGid(g.gid)) continue;
    readFirstLine(joinPath(portDir, "gid_attrs/types/" + idx), &g.type);
    readFirstLine(joinPath(portDir, "gid_attrs/ndevs/" + idx), &g.netdev);
    uint32_t addr = 0;
    if (gidIpv4(g.gid, &addr)) {
      g.ipv4.addr = addr;
      g.ipv4.prefix = prefixOf(netifs, g.netdev, addr);
      if (g.ipv4.prefix == 0) {
        RCN_INFO(RCN_LOG_TOPO, "GID %s of %s: no interface holds its address; subnet unknown",
                 g.gid.c_str(), portDir.c_str());
        g.ipv4 = Ipv4Net{};
      }
    }
    if (port->netdev.empty() && !g.netdev.empty()) port->netdev = g.netdev;
    port->gids.push_back(g);
  }
  std::sort(port->gids.begin(), port->gids.end(),
            [](const GidInfo& a, const GidInfo& b) { return a.index < b.index; });
}

static PortInfo readPort(const std::string& root, const std::string& portDir, int portNum,
                         const std::vector<NetIf>& netifs) {
  PortInfo port;
  port.port = portNum;
  std::string text;
  if (readFirstLine(joinPath(portDir, "state"), &text)) port.state = portState(text);
  readFirstLine(joinPath(portDir, "link_layer"), &port.linkLayer);
  readGids(portDir, netifs, &port);
  if (!port.netdev.empty() && readFirstLine(joinPath(root, "sys/class/net/" + port.netdev + "/mtu"), &text))
    port.mtu = roceMtuOf(atoi(text.c_str()));
  return port;
}

#ifdef ROCENANTE_HAVE_IBVERBS
static int ibvMtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
  }
}

// Overwrites what sysfs said about each port with what the verbs driver says.
static void confirmWithIbverbs(std::vector<NicInfo>* nics) {
  std::string why;
  if (!verbsApiUsable(&why)) {
    RCN_INFO(RCN_LOG_TOPO, "%s; keeping sysfs port facts", why.c_str());
    return;
  }
  const VerbsApi& api = verbsApi();
  int count = 0;
  ibv_device** list = api.getDeviceList(&count);
  if (!list) {
    RCN_INFO(RCN_LOG_TOPO, "ibv_get_device_list failed: %s; keeping sysfs port facts", strerror(errno));
    return;
  }
  for (int i = 0; i < count; i++) {
    std::string name = api.getDeviceName(list[i]);
    auto nic = std::find_if(nics->begin(), nics->end(), [&](const NicInfo& n) { return n.name == name; });
    if (nic == nics->end()) continue;
    ibv_context* ctx = api.openDevice(list[i]);
    if (!ctx) {
      RCN_INFO(RCN_LOG_TOPO, "ibv_open_device(%s) failed: %s", name.c_str(), strerror(errno));
      continue;
    }
    for (PortInfo& port : nic->ports) {
      ibv_port_attr attr{};
      if (api.queryPort(ctx, uint8_t(port.port), &attr) != 0) continue;
      port.state = attr.state == IBV_PORT_ACTIVE ? "ACTIVE" : api.portStateStr(attr.state);
      port.linkLayer = attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
      port.mtu = ibvMtuBytes(attr.active_mtu);
    }
    api.closeDevice(ctx);
  }
  api.freeDeviceList(list);
}
#endif

rcnResult_t discoverRdma(const TopoProbeOptions& opt, RankTopo* out) {
  out->nics.clear();
  std::string classDir = joinPath(opt.root, "sys/class/infiniband");
  for (const std::string& dev : listDir(classDir)) {
    NicInfo nic;
    nic.name = dev;
    std::string pciPath = resolvePath(joinPath(classDir, dev + "/device"));
    nic.pciBusId = pciPath.substr(pciPath.find_last_of('/') + 1);
    std::string portsDir = joinPath(classDir, dev + "/ports");
    for (const std::string& p : listDir(portsDir))
      nic.ports.push_back(readPort(opt.root, joinPath(portsDir, p), atoi(p.c_str()), out->netifs));
    std::sort(nic.ports.begin(), nic.ports.end(),
              [](const PortInfo& a, const PortInfo& b) { return a.port < b.port; });
    out->nics.push_back(nic);
  }
#ifdef ROCENANTE_HAVE_IBVERBS
  bool realRoot = opt.root.empty() || opt.root == "/";
  if (realRoot && opt.useIbverbs && !out->nics.empty()) confirmWithIbverbs(&out->nics);
#endif
  return rcnSuccess;
}

namespace {

// An InfiniBand GID's subnet prefix (its first 64 bits) in full, as
// "ib:fe80:0000:0000:0000", whatever spelling the GID came in (a topology
// file may shorten it or use capitals); empty for a GID that is not an IPv6
// address, which then names no fabric.
std::string ibSubnet(const std::string& gid) {
  in6_addr addr{};
  if (inet_pton(AF_INET6, gid.c_str(), &addr) != 1) return "";
  const uint8_t* b = addr.s6_addr;
  char text[32];
  std::snprintf(text, sizeof text, "ib:%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
                b[6], b[7]);
  return text;
}

}  // namespace

std::vector<std::string> rdmaSubnets(const RankTopo& t) {
  std::vector<std::string> subnets;
  for (const NicInfo& nic : t.nics)
    for (const PortInfo& port : nic.ports) {
      if (!port.active()) continue;
      for (const GidInfo& g : port.gids) {
        std::string s;
        if (port.linkLayer == "InfiniBand") s = ibSubnet(g.gid);
        else if (g.isRoceV2() && g.ipv4.valid()) s = g.ipv4.subnetText();
        if (!s.empty() && std::find(subnets.begin(), subnets.end(), s) == subnets.end())
          subnets.push_back(s);
      }
    }
  std::sort(subnets.begin(), subnets.end());
  return subnets;
}

}  // namespace rcn
