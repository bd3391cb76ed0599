// SPDX-License-Identifier: BSD-3-Clause
// The communicator-wide class. Ranks on one machine (same host name and boot
// id) form a node. One node: the p2p path is eligible when every pair of the
// ranks' GPUs has peer access. Several nodes: two nodes are linked when they
// share a subnet of an active RDMA port (a RoCE v2 GID's IPv4 subnet, or an
// InfiniBand subnet prefix); without RDMA on every node, plain IPv4
// interfaces decide (the tcp wire). The one-shot exchange needs every pair of
// nodes linked: a switch, two nodes cabled directly, or a 3-node ring. A 4+
// node ring, or subnets split between groups of nodes, is partial.
#include <algorithm>
#include <map>
#include <set>

#include "core/check.h"
#include "topology/topology.h"

namespace rcn {

static std::string joinList(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s.empty() ? "none" : s;
}

static void groupNodes(CommTopo* topo) {
  std::map<std::string, int> nodeOfKey;
  std::map<std::string, int> hostCount;
  topo->nodeOfRank.assign(topo->ranks.size(), 0);
  topo->nodeNames.clear();
  for (size_t r = 0; r < topo->ranks.size(); r++) {
    const RankTopo& t = topo->ranks[r];
    std::string key = t.host + "\n" + t.bootId;
    auto it = nodeOfKey.find(key);
    if (it == nodeOfKey.end()) {
      it = nodeOfKey.emplace(key, static_cast<int>(topo->nodeNames.size())).first;
      // Two machines with one host name (cloned images) still need distinct names.
      int seen = hostCount[t.host]++;
      topo->nodeNames.push_back(seen == 0 ? t.host : t.host + "#" + std::to_string(seen + 1));
    }
    topo->nodeOfRank[r] = it->second;
  }
  topo->nnodes = static_cast<int>(topo->nodeNames.size());
}

const GpuInfo* gpuByIndex(const RankTopo& t, int index) {
  for (const GpuInfo& g : t.gpus)
    if (g.index == index) return &g;
  return nullptr;
}

static const GpuInfo* gpuByBus(const RankTopo& t, const std::string& bus) {
  for (const GpuInfo& g : t.gpus)
    if (!bus.empty() && g.pciBusId == bus) return &g;
  return nullptr;
}

// Whether rank a's GPU can map rank b's: 1 yes, 0 no, -1 cannot tell.
// Matched by PCI bus id, since CUDA ordinals differ between processes with
// different CUDA_VISIBLE_DEVICES.
static int peerAccess(const RankTopo& a, const RankTopo& b, bool* nvlink) {
  const GpuInfo* ga = ownGpu(a);
  const GpuInfo* gbOwn = ownGpu(b);
  if (!ga || !gbOwn) return -1;
  if (ga->pciBusId == gbOwn->pciBusId && !ga->pciBusId.empty()) {
    *nvlink = false;
    return 1;  // the same GPU
  }
  const GpuInfo* gbInA = gpuByBus(a, gbOwn->pciBusId);
  if (!gbInA && gbOwn->pciBusId.empty()) gbInA = gpuByIndex(a, b.cudaDev);
  if (!gbInA) return -1;
  for (const GpuLink& l : ga->links)
    if (l.peer == gbInA->index) {
      *nvlink = l.nvlink;
      return l.access ? 1 : 0;
    }
  return -1;
}

static void classifySingleHost(CommTopo* topo) {
  topo->cls = TopoClass::SingleHost;
  topo->wire.clear();
  const std::string& host = topo->nodeNames[0];
  int n = static_cast<int>(topo->ranks.size());
  for (const RankTopo& t : topo->ranks) {
    if (t.cudaDev < 0) {
      topo->p2pEligible = false;
      topo->reason = "single host '" + host + "', " + std::to_string(n) + (n == 1 ? " rank" : " ranks") + "; rank " +
                     std::to_string(t.rank) + " has no GPU, so p2p is not eligible";
      return;
    }
  }
  int nvlinkPairs = 0, pciePairs = 0, unknownPairs = 0;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      if (a == b) continue;
      bool nvlink = false;
      int access = peerAccess(topo->ranks[a], topo->ranks[b], &nvlink);
      if (access == 0) {
        topo->p2pEligible = false;
        topo->reason = "single host '" + host + "', " + std::to_string(n) + " ranks; GPU " +
                       std::to_string(topo->ranks[a].cudaDev) + " of rank " + std::to_string(a) +
                       " has no peer access to GPU " + std::to_string(topo->ranks[b].cudaDev) +
                       " of rank " + std::to_string(b) + ", so p2p is not eligible";
        return;
      }
      if (a < b) (access < 0 ? unknownPairs : nvlink ? nvlinkPairs : pciePairs)++;
    }
  topo->p2pEligible = true;
  topo->reason = "single host '" + host + "', " + std::to_string(n) + " rank" + (n == 1 ? "" : "s");
  if (n > 1) {
    topo->reason += "; GPU pairs with peer access: " + std::to_string(nvlinkPairs) + " NVLink, " +
                    std::to_string(pciePairs) + " PCIe";
    if (unknownPairs)
      topo->reason += ", " + std::to_string(unknownPairs) + " not visible to each other (the self-test decides)";
  }
}

static std::vector<std::vector<std::string>> nodeSubnets(const CommTopo& topo, bool rdma) {
  std::vector<std::set<std::string>> sets(topo.nnodes);
  for (size_t r = 0; r < topo.ranks.size(); r++) {
    const RankTopo& t = topo.ranks[r];
    std::set<std::string>& s = sets[topo.nodeOfRank[r]];
    if (rdma) {
      for (const std::string& sub : rdmaSubnets(t)) s.insert(sub);
    } else {
      for (const NetIf& n : t.netifs)
        if (n.ipv4.valid()) s.insert(n.ipv4.subnetText());
    }
  }
  std::vector<std::vector<std::string>> out;
  for (const auto& s : sets) out.emplace_back(s.begin(), s.end());
  return out;
}

static int firstNodeWithout(const std::vector<std::vector<std::string>>& subnets) {
  for (size_t i = 0; i < subnets.size(); i++)
    if (subnets[i].empty()) return static_cast<int>(i);
  return -1;
}

static std::vector<std::string> shared(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

static void classifyMultiNode(CommTopo* topo) {
  topo->p2pEligible = false;
  auto subnets = nodeSubnets(*topo, true);
  std::string kind = "RDMA";
  topo->wire = "rdma";
  std::string note;
  int bare = firstNodeWithout(subnets);
  if (bare >= 0) {
    bool none = true;
    for (const auto& s : subnets) none = none && s.empty();
    note = none ? " (no node has an active RoCE v2 or InfiniBand port, so IPv4 interfaces decide)"
                : " (node " + topo->nodeNames[bare] + " has no active RoCE v2 or InfiniBand port, so IPv4 interfaces decide)";
    subnets = nodeSubnets(*topo, false);
    kind = "IPv4";
    topo->wire = "tcp";
    bare = firstNodeWithout(subnets);
    if (bare >= 0) {
      topo->cls = TopoClass::Unknown;
      topo->wire.clear();
      topo->reason = std::to_string(topo->nnodes) + " nodes; node " + topo->nodeNames[bare] +
                     " has neither an active RDMA port nor an IPv4 interface, so reachability is unknown";
      return;
    }
  }
  std::string nodes = std::to_string(topo->nnodes) + " nodes";
  for (int a = 0; a < topo->nnodes; a++)
    for (int b = a + 1; b < topo->nnodes; b++) {
      if (!shared(subnets[a], subnets[b]).empty()) continue;
      topo->cls = TopoClass::MultiNodePartial;
      topo->reason = nodes + "; nodes " + topo->nodeNames[a] + " and " + topo->nodeNames[b] + " share no " +
                     kind + " subnet (" + topo->nodeNames[a] + ": " + joinList(subnets[a]) + "; " +
                     topo->nodeNames[b] + ": " + joinList(subnets[b]) +
                     "), so not every pair of nodes has a direct path (a ring of 4+ nodes, or split subnets)" + note;
      return;
    }
  topo->cls = TopoClass::MultiNodeAnyToAny;
  std::vector<std::string> common = subnets[0];
  for (const auto& s : subnets) common = shared(common, s);
  if (!common.empty())
    topo->reason = nodes + " on a common " + kind + " subnet " + common[0] + " (a switch or a direct cable)";
  else
    topo->reason = nodes + "; every pair of nodes shares its own " + kind + " subnet (a full mesh, e.g. a 3-node ring)";
  topo->reason += note;
}

rcnResult_t topoClassify(CommTopo* topo) {
  RCN_ARG_CHECK(!topo->ranks.empty(), "topoClassify: no ranks");
  for (size_t r = 0; r < topo->ranks.size(); r++)
    RCN_ARG_CHECK(topo->ranks[r].rank == static_cast<int>(r), "topoClassify: entry %zu describes rank %d", r,
                  topo->ranks[r].rank);
  groupNodes(topo);
  if (topo->nnodes == 1) classifySingleHost(topo);
  else classifyMultiNode(topo);
  return rcnSuccess;
}

}  // namespace rcn
