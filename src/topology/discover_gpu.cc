// SPDX-License-Identifier: BSD-3-Clause
// GPUs through cudart calls that only query (no context, no allocation), each
// failing gracefully on a machine without a driver or GPU. NVML is not used,
// so NVLink is inferred: see docs/TOPOLOGY.md ("NVLink without NVML").
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>

#include "core/check.h"
#include "topology/topology.h"

namespace rcn {

// cudart names the driver's CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (124) only
// as a reserved value; the numbers are shared, so we ask for it by number.
static const cudaDeviceAttr kDmaBufSupportedAttr = static_cast<cudaDeviceAttr>(124);

static Support queryFlag(cudaDeviceAttr attr, int dev) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess) {
    cudaGetLastError();  // a failed query must not poison later calls
    return Support::Unknown;
  }
  return v ? Support::Yes : Support::No;
}

static int queryInt(cudaDeviceAttr attr, int dev) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

static int queryP2p(cudaDeviceP2PAttr attr, int from, int to, int fallback) {
  int v = 0;
  if (cudaDeviceGetP2PAttribute(&v, attr, from, to) != cudaSuccess) {
    cudaGetLastError();
    return fallback;
  }
  return v;
}

// Peer access over PCIe does not offer native atomics on NVIDIA GPUs; over
// NVLink (or C2C) it does. With the performance rank recorded alongside, this
// is the best NVML-free signal of an NVLink pair.
static GpuLink probeLink(int from, int to) {
  GpuLink link;
  link.peer = to;
  link.access = queryP2p(cudaDevP2PAttrAccessSupported, from, to, 0) != 0;
  link.perfRank = queryP2p(cudaDevP2PAttrPerformanceRank, from, to, -1);
  bool atomics = queryP2p(cudaDevP2PAttrNativeAtomicSupported, from, to, 0) != 0;
  link.nvlink = link.access && atomics;
  return link;
}

static GpuInfo probeGpu(int dev, int count) {
  GpuInfo g;
  g.index = dev;
  char bus[64] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) == cudaSuccess) {
    g.pciBusId = bus;
    std::transform(g.pciBusId.begin(), g.pciBusId.end(), g.pciBusId.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  } else {
    cudaGetLastError();
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) g.name = prop.name;
  else cudaGetLastError();
  g.ccMajor = queryInt(cudaDevAttrComputeCapabilityMajor, dev);
  g.ccMinor = queryInt(cudaDevAttrComputeCapabilityMinor, dev);
  g.integrated = queryInt(cudaDevAttrIntegrated, dev) != 0;
  g.gdr = queryFlag(cudaDevAttrGPUDirectRDMASupported, dev);
  g.dmaBuf = queryFlag(kDmaBufSupportedAttr, dev);
  for (int peer = 0; peer < count; peer++)
    if (peer != dev) g.links.push_back(probeLink(dev, peer));
  return g;
}

rcnResult_t discoverGpus(const TopoProbeOptions& opt, RankTopo* out) {
  out->gpus.clear();
  if (!opt.useCuda) return rcnSuccess;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    RCN_INFO(RCN_LOG_TOPO, "no GPUs visible: cudaGetDeviceCount says '%s'", cudaGetErrorString(err));
    return rcnSuccess;
  }
  for (int dev = 0; dev < count; dev++) out->gpus.push_back(probeGpu(dev, count));
  return rcnSuccess;
}

}  // namespace rcn
