// SPDX-License-Identifier: BSD-3-Clause
// Where the proxy path keeps its exchange regions: pinned host memory mapped
// into the GPU (integrated GPUs such as DGX Spark's GB10, whose memory is
// host memory anyway; discrete GPUs without GPUDirect RDMA; the shm and tcp
// wires, which copy with the CPU), or GPU memory that the wire writes
// directly: the verbs wire through GPUDirect RDMA (registered through a
// dma-buf, else nvidia-peermem), and the cuda wire, its stand-in on one host.
// Decided from the agreed topology, so every rank decides the same.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"
#include "topology/topology.h"
#include "transport/wire/wire.h"

namespace rcn {

struct RegionPlacement {
  bool device = false;  // GPU memory (else pinned host memory)
  bool dmabuf = false;  // register this rank's through a dma-buf (else peermem)
  std::string why;      // what ruled GPU memory out, or how it is registered
};

enum class GdrMode { Auto, Off, On };

// Parses ROCENANTE_GDR ("auto", "0", "1").
rcnResult_t gdrModeFromParams(GdrMode* out);

// topo may be null (then only the cuda wire gets GPU memory). Fails with
// rcnInvalidUsage, naming the rank and the reason, when mode is On and GPU
// memory cannot be used. dmabufByRank[r]: rank r's libibverbs can register a
// dma-buf (a fact of each host's rdma-core, gathered from every rank).
// nicByRank[r]: the RDMA device rank r's verbs wire opens; auto judges the
// GPU's distance only to that NIC (the topology knows the nearest one's), so
// a rank that opens another is kept in host memory. Empty: not known (each
// rank is taken to open its nearest NIC).
rcnResult_t chooseRegionPlacement(const CommTopo* topo, int rank, WireKind wire, GdrMode mode,
                                  const std::vector<uint8_t>& dmabufByRank, RegionPlacement* out,
                                  const std::vector<std::string>& nicByRank = {});

}  // namespace rcn
