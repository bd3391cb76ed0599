// SPDX-License-Identifier: BSD-3-Clause
// GPU-to-NIC locality from hwloc's PCIe tree (hwloc 2.x). hwloc builds the tree
// from the same sysfs paths locality.cc reads, but also from other sources
// (ACPI, libpciaccess, XML exports), so on the real machine it is asked first.
// Devices are looked up by bus id and turned into the chain locality.cc
// compares: host bridge, bridges, device. Built without hwloc, this file only
// says so and the sysfs reader does the work.
#include "topology/locality.h"

#include "core/log.h"

#ifdef ROCENANTE_HAVE_HWLOC
#include <hwloc.h>

#include <cstdio>
#endif

namespace rcn {

#ifdef ROCENANTE_HAVE_HWLOC

bool hwlocAvailable() { return true; }

namespace {

std::string busIdText(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  char text[32];
  snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.dev, pci.func);
  return text;
}

// The chain of a PCI device, named like the sysfs path components.
PciChain chainOf(hwloc_obj_t dev) {
  PciChain up;
  for (hwloc_obj_t o = dev; o; o = o->parent) {
    if (o->type == HWLOC_OBJ_PCI_DEVICE) {
      up.push_back(busIdText(o->attr->pcidev));
    } else if (o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
      up.push_back(busIdText(o->attr->bridge.upstream.pci));
    } else if (o->type == HWLOC_OBJ_BRIDGE) {  // host bridge: the PCI root
      char text[32];
      snprintf(text, sizeof(text), "pci%04x:%02x", o->attr->bridge.downstream.pci.domain,
               o->attr->bridge.downstream.pci.secondary_bus);
      up.push_back(text);
      break;
    } else {
      break;  // left the I/O tree without a host bridge: the chain starts here
    }
  }
  return PciChain(up.rbegin(), up.rend());
}

// The chain of the device with this bus id; false if hwloc does not show it.
bool lookUp(hwloc_topology_t topo, const std::string& busId, PciChain* chain) {
  hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(topo, busId.c_str());
  if (!dev) return false;
  *chain = chainOf(dev);
  return true;
}

// Loads the machine (xmlPath "") or an XML export with every bridge and PCI
// device kept. OS devices are left out: they are not needed, and asking for
// them would run hwloc's CUDA/NVML/OpenCL plugins inside this process.
bool loadTopology(const std::string& xmlPath, hwloc_topology_t* topo) {
  if (hwloc_topology_init(topo) != 0) return false;
  bool ok = hwloc_topology_set_io_types_filter(*topo, HWLOC_TYPE_FILTER_KEEP_ALL) == 0 &&
            hwloc_topology_set_type_filter(*topo, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE) == 0 &&
            (xmlPath.empty() || hwloc_topology_set_xml(*topo, xmlPath.c_str()) == 0) &&
            hwloc_topology_load(*topo) == 0;
  if (!ok) {
    RCN_INFO(RCN_LOG_TOPO, "hwloc could not load %s", xmlPath.empty() ? "this machine" : xmlPath.c_str());
    hwloc_topology_destroy(*topo);
  }
  return ok;
}

}  // namespace

rcnResult_t discoverLocalityHwloc(const std::string& xmlPath, RankTopo* out) {
  hwloc_topology_t topo;
  if (!loadTopology(xmlPath, &topo)) return rcnSystemError;
  std::vector<PciChain> gpuChains(out->gpus.size()), nicChains(out->nics.size());
  std::string missing;
  for (size_t i = 0; i < out->gpus.size(); i++) {
    const std::string& busId = out->gpus[i].pciBusId;
    if (!busId.empty() && !lookUp(topo, busId, &gpuChains[i])) missing = "GPU " + busId;
  }
  for (size_t i = 0; i < out->nics.size(); i++) {
    const NicInfo& nic = out->nics[i];
    if (nic.pciBusId.empty() || !lookUp(topo, nic.pciBusId, &nicChains[i])) missing = "NIC " + nic.name;
  }
  hwloc_topology_destroy(topo);
  if (!missing.empty()) {
    RCN_INFO(RCN_LOG_TOPO, "hwloc does not show %s", missing.c_str());
    return rcnSystemError;
  }
  assignNearestNics(gpuChains, nicChains, out);
  return rcnSuccess;
}

#else  // built without hwloc

bool hwlocAvailable() { return false; }

rcnResult_t discoverLocalityHwloc(const std::string&, RankTopo*) { return rcnSystemError; }

#endif

}  // namespace rcn
