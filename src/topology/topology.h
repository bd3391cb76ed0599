// SPDX-License-Identifier: BSD-3-Clause
// Topology: what each rank sees on its machine (host, GPUs, RDMA NICs and their
// subnets, GPU-to-NIC locality, GPUDirect RDMA support), gathered over the
// bootstrap into one communicator-wide picture with a class the policy uses.
//
// Discovery reads sysfs under a configurable root, so tests describe real
// layouts with fixture trees; ROCENANTE_TOPO_FILE replaces discovery with a
// file, ROCENANTE_TOPO_DUMP_FILE writes what was found (docs/TOPOLOGY.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/policy.h"
#include "rocenante/rocenante.h"

namespace rcn {

// How far a NIC is from a GPU on the PCIe tree, nearest first (NCCL's names).
enum class PciDistance { Unknown, Pix, Pxb, Phb, Sys };
const char* pciDistanceName(PciDistance d);
bool parsePciDistance(const std::string& text, PciDistance* out);

// A tri-state for capabilities a query may fail to answer.
enum class Support { Unknown, No, Yes };
const char* supportName(Support s);  // "unknown", "no", "yes"

// An IPv4 address with its prefix length ("10.0.1.2/24").
struct Ipv4Net {
  uint32_t addr = 0;  // host byte order
  int prefix = 0;
  bool valid() const { return addr != 0; }
  std::string text() const;        // "10.0.1.2/24"
  std::string subnetText() const;  // "10.0.1.0/24"
};
// Parses "a.b.c.d/p" (or "a.b.c.d", prefix 32). False on bad text.
bool parseIpv4Net(const std::string& text, Ipv4Net* out);

// Link from one local GPU to another.
struct GpuLink {
  int peer = -1;          // CUDA ordinal of the other GPU
  bool access = false;    // cudaDevP2PAttrAccessSupported
  bool nvlink = false;    // heuristic, see docs/TOPOLOGY.md (no NVML)
  int perfRank = -1;      // cudaDevP2PAttrPerformanceRank (lower is faster)
};

struct GpuInfo {
  int index = -1;             // CUDA ordinal
  std::string pciBusId;       // "0000:1b:00.0", lower case
  std::string name;
  int ccMajor = 0, ccMinor = 0;
  bool integrated = false;
  Support gdr = Support::Unknown;     // cudaDevAttrGPUDirectRDMASupported
  Support dmaBuf = Support::Unknown;  // driver's DMA_BUF_SUPPORTED
  std::string nearestNic;             // RDMA device nearest on PCIe ("" if none)
  PciDistance nicDistance = PciDistance::Unknown;
  std::vector<GpuLink> links;         // one per other local GPU
};

struct GidInfo {
  int index = 0;
  std::string gid;     // "fe80:0000:...:" as sysfs writes it
  std::string type;    // "RoCE v2", "RoCE v1", "IB/RoCE v1", or "" for IB
  std::string netdev;  // from gid_attrs/ndevs
  Ipv4Net ipv4;        // the IPv4 address of an IPv4-mapped GID, with the netdev's prefix
  bool isRoceV2() const { return type == "RoCE v2"; }
};

struct PortInfo {
  int port = 1;
  std::string state;      // "ACTIVE", "DOWN", ...
  std::string linkLayer;  // "Ethernet" or "InfiniBand"
  int mtu = 0;            // active MTU in bytes (0 unknown)
  std::string netdev;     // the Ethernet interface behind a RoCE port
  std::vector<GidInfo> gids;
  bool active() const { return state == "ACTIVE"; }
};

struct NicInfo {
  std::string name;      // "mlx5_0", "rocep1s0f0"
  std::string pciBusId;  // of the PCIe function
  std::vector<PortInfo> ports;
};

// A plain IPv4 interface (the tcp wire's view of reachability).
struct NetIf {
  std::string name;
  Ipv4Net ipv4;
};

// What one rank found on its machine.
struct RankTopo {
  int rank = 0;
  std::string host;
  std::string bootId;
  int cudaDev = -1;           // this rank's GPU, -1 on the host backend
  std::string peerMemModule;  // "nvidia_peermem" / "nv_peer_mem" when loaded, else ""
  std::vector<GpuInfo> gpus;  // every GPU visible on the machine
  std::vector<NicInfo> nics;
  std::vector<NetIf> netifs;
  std::string source;         // "probe" or the file it came from
};

// The communicator-wide picture.
struct CommTopo {
  std::vector<RankTopo> ranks;   // indexed by rank
  std::vector<int> nodeOfRank;   // node index of each rank (ranks on one machine share it)
  std::vector<std::string> nodeNames;
  int nnodes = 0;
  TopoClass cls = TopoClass::Unknown;
  bool p2pEligible = false;      // single host and every GPU pair has peer access
  std::string wire;              // how nodes reach each other: "rdma", "tcp", "" (one host)
  std::string reason;            // one line saying why this class
};

// Where discovery looks. Tests point root at a fixture tree.
struct TopoProbeOptions {
  std::string root = "/";  // sysfs at <root>/sys, proc at <root>/proc
  int cudaDev = -1;        // this rank's GPU (-1: none)
  bool useCuda = true;     // false: skip cudart (fixture tests add GPUs themselves)
  bool useIbverbs = true;  // query libibverbs when built with it and root is "/"
};

// --- discovery (discover_*.cc) ------------------------------------------------
rcnResult_t discoverHost(const TopoProbeOptions& opt, RankTopo* out);
rcnResult_t discoverGpus(const TopoProbeOptions& opt, RankTopo* out);
rcnResult_t discoverRdma(const TopoProbeOptions& opt, RankTopo* out);
rcnResult_t discoverNetifs(const TopoProbeOptions& opt, RankTopo* out);
// Fills each GPU's nearest NIC from the PCIe tree (needs gpus and nics).
rcnResult_t discoverLocality(const TopoProbeOptions& opt, RankTopo* out);

// All of the above for this rank.
rcnResult_t topoProbeLocal(const TopoProbeOptions& opt, int rank, RankTopo* out);

// This rank's description: from ROCENANTE_TOPO_FILE when set (the entry for
// `rank`; the file must describe exactly nranks ranks unless nranks is -1),
// else probed. cudaDev: the rank's GPU or -1.
rcnResult_t topoDiscoverLocal(int rank, int cudaDev, RankTopo* out, int nranks = -1);

// --- exchange (serialize.cc, topology.cc) ---------------------------------------
// A compact binary form for Bootstrap::allGather.
std::string topoEncode(const RankTopo& t);
rcnResult_t topoDecode(const std::string& blob, RankTopo* out);

// Exchanges every rank's description; out->ranks is indexed by rank afterwards.
rcnResult_t topoGather(Bootstrap& bootstrap, const RankTopo& local, CommTopo* out);

// --- classification (classify.cc) -----------------------------------------------
// Fills nodes, class, wire, p2pEligible and reason from topo->ranks.
rcnResult_t topoClassify(CommTopo* topo);
// The GPU of t with CUDA ordinal index as t's process sees it; null if none.
const GpuInfo* gpuByIndex(const RankTopo& t, int index);
// The GPU rank t runs on (its cudaDev); null if none.
inline const GpuInfo* ownGpu(const RankTopo& t) { return gpuByIndex(t, t.cudaDev); }

// Writes ROCENANTE_TOPO_DUMP_FILE when it is set; a write that fails is a warning.
void topoDumpIfAsked(const CommTopo& topo);

// Discover, gather, classify; rank 0 writes ROCENANTE_TOPO_DUMP_FILE when set.
// What comm creation calls.
rcnResult_t topoBuild(Bootstrap& bootstrap, int cudaDev, CommTopo* out);

// --- files (topo_file.cc) ---------------------------------------------------------
// JSON text of a communicator's picture (also valid YAML, so topoLoadFile reads
// it). extra: a JSON value stored under the informational key "rocenante".
std::string topoToJson(const CommTopo& topo, const std::string& extra = "");
// s as a JSON string literal, quotes included.
std::string jsonQuote(const std::string& s);
rcnResult_t topoWriteFile(const std::string& path, const CommTopo& topo);
// The largest GPU index (CUDA ordinal, link peer) a topology file may give.
constexpr int kMaxTopoGpuIndex = 1023;
// The largest topology file: yaml-cpp holds about 400 bytes of memory per
// byte of text, and a rank's entry is a few KB (2000 ranks fit).
constexpr size_t kMaxTopoFileBytes = size_t(8) << 20;
// Reads a topology file (YAML; JSON is accepted as YAML). Errors name the
// file, the line and the key.
rcnResult_t topoLoadFile(const std::string& path, std::vector<RankTopo>* ranks);
rcnResult_t topoParseText(const std::string& text, const std::string& fileName,
                          std::vector<RankTopo>* ranks);

// --- text helpers -------------------------------------------------------------------
// The readable table rocenante-probe prints for one rank.
std::string topoLocalTable(const RankTopo& t);
// Every RDMA subnet ("10.0.1.0/24") of active RoCE v2 / IB ports of this rank.
std::vector<std::string> rdmaSubnets(const RankTopo& t);

}  // namespace rcn
