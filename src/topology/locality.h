// SPDX-License-Identifier: BSD-3-Clause
// GPU-to-NIC locality, shared by the two readers of the PCIe tree: sysfs paths
// (locality.cc) and hwloc (locality_hwloc.cc). Both turn each device into the
// same chain of names and leave the choosing to assignNearestNics.
#pragma once

#include <string>
#include <vector>

#include "topology/topology.h"

namespace rcn {

// A device's place on the PCIe tree: its host bridge ("pci0000:00") first,
// then every bridge below it by bus id, the device itself last. Empty: unknown.
using PciChain = std::vector<std::string>;

// The distance class of two devices from their chains (Unknown if either is empty).
PciDistance pciChainDistance(const PciChain& a, const PciChain& b);

// Sets each GPU's nearestNic and nicDistance. gpuChains[i] belongs to
// out->gpus[i], nicChains[j] to out->nics[j]. NICs with an active port win
// over the others; at equal distance the first NIC wins.
void assignNearestNics(const std::vector<PciChain>& gpuChains, const std::vector<PciChain>& nicChains,
                       RankTopo* out);

// True when built with hwloc (ROCENANTE_HAVE_HWLOC).
bool hwlocAvailable();

// Locality from hwloc's PCIe tree. xmlPath "": this machine; otherwise an
// hwloc XML export (how tests describe a machine). rcnSuccess once every GPU
// with a bus id and every NIC was found and out is filled; rcnSystemError,
// out untouched, when hwloc is not built in, fails to load, or misses a
// device: the caller then uses the sysfs reader.
rcnResult_t discoverLocalityHwloc(const std::string& xmlPath, RankTopo* out);

}  // namespace rcn
