// SPDX-License-Identifier: BSD-3-Clause
// The readable table rocenante-probe prints for one machine.
#include <cstdio>
#include <sstream>

#include "topology/topology.h"

namespace rcn {

static std::string linkText(const GpuLink& l) {
  if (!l.access) return "none";
  return std::string(l.nvlink ? "NVLink" : "PCIe") + " (rank " + std::to_string(l.perfRank) + ")";
}

static void gpuTable(std::ostringstream& o, const RankTopo& t) {
  if (t.gpus.empty()) {
    o << "GPUs: none found (no CUDA driver or no GPU); rocenante would use the host backend\n";
    return;
  }
  o << "GPUs:\n";
  char line[512];
  snprintf(line, sizeof line, "  %-3s %-14s %-28s %-5s %-10s %-8s %-7s %s\n", "#", "PCI", "name", "cc", "kind",
           "GDR", "dma-buf", "nearest NIC");
  o << line;
  for (const GpuInfo& g : t.gpus) {
    std::string nic = g.nearestNic.empty() ? "-" : g.nearestNic + " (" + pciDistanceName(g.nicDistance) + ")";
    std::string cc = std::to_string(g.ccMajor) + "." + std::to_string(g.ccMinor);
    snprintf(line, sizeof line, "  %-3d %-14s %-28.28s %-5s %-10s %-8s %-7s %s%s\n", g.index, g.pciBusId.c_str(),
             g.name.c_str(), cc.c_str(), g.integrated ? "integrated" : "discrete", supportName(g.gdr),
             supportName(g.dmaBuf), nic.c_str(), g.index == t.cudaDev ? "   <- this rank" : "");
    o << line;
  }
  if (t.gpus.size() > 1) {
    o << "GPU links (peer access; NVLink inferred, see docs/TOPOLOGY.md):\n";
    for (const GpuInfo& g : t.gpus)
      for (const GpuLink& l : g.links)
        if (g.index < l.peer) o << "  GPU " << g.index << " <-> GPU " << l.peer << ": " << linkText(l) << "\n";
  }
}

static void nicTable(std::ostringstream& o, const RankTopo& t) {
  if (t.nics.empty()) {
    o << "RDMA devices: none found (no /sys/class/infiniband entries)\n";
    return;
  }
  o << "RDMA devices:\n";
  for (const NicInfo& n : t.nics) {
    o << "  " << n.name << " (PCI " << (n.pciBusId.empty() ? "?" : n.pciBusId) << ")\n";
    for (const PortInfo& p : n.ports) {
      o << "    port " << p.port << ": " << (p.state.empty() ? "?" : p.state) << ", "
        << (p.linkLayer.empty() ? "?" : p.linkLayer) << ", MTU " << p.mtu
        << (p.netdev.empty() ? "" : ", netdev " + p.netdev) << "\n";
      for (const GidInfo& g : p.gids) {
        o << "      GID " << g.index << " " << g.gid << "  " << (g.type.empty() ? "IB" : g.type);
        if (g.ipv4.valid()) o << "  " << g.ipv4.text() << " (subnet " << g.ipv4.subnetText() << ")";
        o << "\n";
      }
    }
  }
}

std::string topoLocalTable(const RankTopo& t) {
  std::ostringstream o;
  o << "host: " << t.host << "  (boot id " << (t.bootId.empty() ? "?" : t.bootId) << ")\n";
  gpuTable(o, t);
  nicTable(o, t);
  auto subnets = rdmaSubnets(t);
  o << "RDMA subnets (active RoCE v2 / IB ports):";
  for (const std::string& s : subnets) o << " " << s;
  o << (subnets.empty() ? " none\n" : "\n");
  o << "IPv4 interfaces:";
  for (const NetIf& n : t.netifs) o << " " << n.name << "=" << n.ipv4.text();
  o << (t.netifs.empty() ? " none\n" : "\n");
  o << "GPUDirect RDMA peer-memory module: " << (t.peerMemModule.empty() ? "not loaded" : t.peerMemModule) << "\n";
  return o.str();
}

}  // namespace rcn
