// SPDX-License-Identifier: BSD-3-Clause
#include "transport/proxy/region_placement.h"

#include "core/check.h"
#include "core/log.h"
#include "core/params.h"

namespace rcn {

namespace {

// Whether the NIC registers this GPU's memory through dma-buf (the GPU
// exports it and its host's rdma-core can take it) rather than nvidia-peermem.
bool registersByDmabuf(const GpuInfo& gpu, bool dmabufRegistration) {
  return gpu.dmaBuf == Support::Yes && dmabufRegistration;
}

// Why rank r cannot take GPUDirect RDMA writes ("" when it can). Auto also
// wants the GPU and its nearest NIC under one PCIe switch (NCCL's default
// GDR level): further apart, the NIC's reads of GPU memory cross the CPU's
// root complex and pinned host memory is usually as fast.
std::string gdrObstacle(const RankTopo& r, int rank, GdrMode mode, bool dmabufRegistration, const std::string& nic) {
  const std::string who = "rank " + std::to_string(rank) + "'s GPU";
  const GpuInfo* gpu = ownGpu(r);
  if (!gpu) return who + " is not in its topology";
  if (gpu->integrated) return who + " is integrated (its memory is host memory)";
  if (gpu->gdr != Support::Yes) return who + " does not report GPUDirect RDMA support";
  if (!registersByDmabuf(*gpu, dmabufRegistration) && r.peerMemModule.empty())
    return "rank " + std::to_string(rank) + " has neither dma-buf registration nor nvidia-peermem";
  if (mode == GdrMode::Auto && !nic.empty() && nic != gpu->nearestNic)
    return "rank " + std::to_string(rank) + " opens " + nic + ", not its GPU's nearest NIC " +
           (gpu->nearestNic.empty() ? std::string("(none)") : gpu->nearestNic) +
           " (auto judges GPUDirect RDMA by the NIC it opens)";
  if (mode == GdrMode::Auto && gpu->nicDistance != PciDistance::Pix && gpu->nicDistance != PciDistance::Pxb)
    return who + " is " + pciDistanceName(gpu->nicDistance) + " from its nearest NIC (auto wants PIX or PXB)";
  return "";
}

}  // namespace

rcnResult_t gdrModeFromParams(GdrMode* out) {
  std::string text;
  RCN_CHECK(paramChoice(ParamId::Gdr, &text));
  if (text == "0") *out = GdrMode::Off;
  else if (text == "1") *out = GdrMode::On;
  else *out = GdrMode::Auto;
  return rcnSuccess;
}

rcnResult_t chooseRegionPlacement(const CommTopo* topo, int rank, WireKind wire, GdrMode mode,
                                  const std::vector<uint8_t>& dmabufByRank, RegionPlacement* out,
                                  const std::vector<std::string>& nicByRank) {
  *out = RegionPlacement{};
  if (wire == WireKind::Cuda) {  // the stand-in exists to run the GPU-memory protocol
    out->device = true;
    out->why = "GPU memory, written by the copy engine (cuda wire)";
    return rcnSuccess;
  }
  if (mode == GdrMode::Off) {
    out->why = "ROCENANTE_GDR=0";
    return rcnSuccess;
  }
  if (wire != WireKind::Verbs) {
    out->why = "the shm and tcp wires copy with the CPU";
  } else if (!topo || topo->ranks.empty() || dmabufByRank.size() != topo->ranks.size()) {
    out->why = "no topology to check GPUDirect RDMA against";
  } else {
    for (int r = 0; r < int(topo->ranks.size()) && out->why.empty(); ++r)
      out->why = gdrObstacle(topo->ranks[r], r, mode, dmabufByRank[r] != 0,
                             size_t(r) < nicByRank.size() ? nicByRank[r] : std::string());
    if (out->why.empty()) {
      const GpuInfo* mine = ownGpu(topo->ranks[rank]);
      out->device = true;
      out->dmabuf = registersByDmabuf(*mine, dmabufByRank[rank] != 0);
      out->why = out->dmabuf ? "GPU memory, registered through dma-buf" : "GPU memory, registered through peermem";
    }
  }
  if (!out->device && mode == GdrMode::On) {
    out->why = "ROCENANTE_GDR=1, but " + out->why;
    RCN_WARN(RCN_LOG_TRANSPORT, "%s", out->why.c_str());
    return rcnInvalidUsage;
  }
  return rcnSuccess;
}

}  // namespace rcn
