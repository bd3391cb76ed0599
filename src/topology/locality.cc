// SPDX-License-Identifier: BSD-3-Clause
// GPU-to-NIC locality from the PCIe tree in sysfs: a device's resolved path
// (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...) lists the host bridge
// and every bridge above it, so the shared prefix of two paths says how close
// they are. On the real machine, when built with hwloc, hwloc's view of the same
// tree is asked first (locality_hwloc.cc); fixture trees always use sysfs.
#include "topology/locality.h"

#include <sstream>

#include "core/check.h"
#include "core/log.h"
#include "topology/sysfs.h"

namespace rcn {

// Components below /sys/devices: host bridge first, the device last.
static PciChain pciChain(const std::string& resolved) {
  PciChain chain;
  size_t at = resolved.find("/devices/");
  if (at == std::string::npos) return chain;
  std::istringstream parts(resolved.substr(at + 9));
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.rfind("pci", 0) == 0 || part.find(':') != std::string::npos) chain.push_back(part);
    else break;  // "infiniband/...", "net/..." below the PCI function
  }
  return chain;
}

// PIX: both sit below one PCIe switch (or are functions of one device);
// PXB: below the same root port through several switches; PHB: same host
// bridge only; SYS: different host bridges (across the CPU interconnect).
PciDistance pciChainDistance(const PciChain& a, const PciChain& b) {
  if (a.empty() || b.empty()) return PciDistance::Unknown;
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) common++;
  if (common == 0) return PciDistance::Sys;
  if (common == 1) return PciDistance::Phb;
  size_t upA = a.size() - common, upB = b.size() - common;
  return (upA <= 2 && upB <= 2) ? PciDistance::Pix : PciDistance::Pxb;
}

void assignNearestNics(const std::vector<PciChain>& gpuChains, const std::vector<PciChain>& nicChains,
                       RankTopo* out) {
  // A NIC with no active port carries no traffic: consider the others first.
  bool anyActive = false;
  std::vector<bool> active;
  for (const NicInfo& nic : out->nics) {
    bool a = false;
    for (const PortInfo& p : nic.ports) a = a || p.active();
    active.push_back(a);
    anyActive = anyActive || a;
  }
  for (size_t g = 0; g < out->gpus.size(); g++) {
    GpuInfo& gpu = out->gpus[g];
    gpu.nearestNic.clear();
    gpu.nicDistance = PciDistance::Unknown;
    for (size_t i = 0; i < out->nics.size(); i++) {
      if (anyActive && !active[i]) continue;
      PciDistance d = pciChainDistance(gpuChains[g], nicChains[i]);
      if (d == PciDistance::Unknown) continue;
      if (gpu.nicDistance == PciDistance::Unknown || d < gpu.nicDistance) {
        gpu.nicDistance = d;
        gpu.nearestNic = out->nics[i].name;
      }
    }
  }
}

rcnResult_t discoverLocality(const TopoProbeOptions& opt, RankTopo* out) {
  // hwloc reads the live machine only; a fixture root is sysfs by definition.
  if (opt.root == "/" && hwlocAvailable() && !out->gpus.empty() && !out->nics.empty()) {
    if (discoverLocalityHwloc("", out) == rcnSuccess) return rcnSuccess;
    RCN_INFO(RCN_LOG_TOPO, "hwloc locality unavailable; reading the PCIe tree from sysfs");
  }
  std::vector<PciChain> gpuChains, nicChains;
  for (const GpuInfo& gpu : out->gpus)
    gpuChains.push_back(gpu.pciBusId.empty() ? PciChain{}
                        : pciChain(resolvePath(joinPath(opt.root, "sys/bus/pci/devices/" + gpu.pciBusId))));
  for (const NicInfo& nic : out->nics)
    nicChains.push_back(pciChain(resolvePath(joinPath(opt.root, "sys/class/infiniband/" + nic.name + "/device"))));
  assignNearestNics(gpuChains, nicChains, out);
  return rcnSuccess;
}

}  // namespace rcn
