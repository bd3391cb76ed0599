// SPDX-License-Identifier: BSD-3-Clause
#include "topology/topology.h"
#include "transport/wire/wire.h"

namespace rcn {

std::string verbsPreferredNic(const FastPathContext& ctx) {
  if (!ctx.topo || ctx.rank < 0 || ctx.rank >= int(ctx.topo->ranks.size())) return "";
  const GpuInfo* gpu = ownGpu(ctx.topo->ranks[ctx.rank]);
  return gpu ? gpu->nearestNic : "";
}

}  // namespace rcn

#if !ROCENANTE_HAVE_IBVERBS

namespace rcn {
bool verbsDeviceAvailable() { return false; }
bool verbsPortSummary(VerbsPortSummary*, std::string* why, const std::string&) {
  *why = "rocenante was built without libibverbs";
  return false;
}
bool verbsRailSummaries(std::vector<VerbsPortSummary>* out, std::string* why) {
  out->clear();
  *why = "rocenante was built without libibverbs";
  return false;
}
}  // namespace rcn

#else

#include "transport/wire/verbs_device.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/check.h"

#include "core/log.h"
#include "transport/wire/verbs_api.h"
#include "transport/wire/verbs_select.h"

namespace rcn {

namespace {

std::string gSysfsRoot = "/sys/class/infiniband";

// The GID index a port would use, or -1 with why.
int choosePortGid(const std::string& device, int port, const ibv_port_attr& attr, const GidPolicy& policy,
                  const GidReach* reach, std::string* why) {
  if (attr.link_layer != IBV_LINK_LAYER_ETHERNET) return 0;  // InfiniBand routes by LID
  const int fixed = gidIndexFromEnv();
  return fixed >= 0 ? fixed : findGid(gSysfsRoot, device, port, policy, why, reach);
}

// A rank's GIDs that can carry RoCE traffic, as the topology lists them.
std::vector<GidBytes> usableGids(const RankTopo& rank) {
  std::vector<GidBytes> out;
  for (const NicInfo& nic : rank.nics)
    for (const PortInfo& port : nic.ports) {
      if (!port.active() || port.linkLayer != "Ethernet") continue;
      for (const GidInfo& info : port.gids) {
        GidBytes gid{};
        if (info.isRoceV2() && parseGidText(info.gid, gid.data()) && !gidIsLinkLocalOrZero(gid.data()))
          out.push_back(gid);
      }
    }
  return out;
}

bool sameHost(const CommTopo& topo, int a, int b) {
  if (topo.nodeOfRank.size() == topo.ranks.size()) return topo.nodeOfRank[a] == topo.nodeOfRank[b];
  return topo.ranks[a].host == topo.ranks[b].host && topo.ranks[a].bootId == topo.ranks[b].bootId;
}

}  // namespace

void setVerbsSysfsRootForTest(const char* root) { gSysfsRoot = root ? root : "/sys/class/infiniband"; }

GidReach gidReachFromTopo(const CommTopo& topo, int rank) {
  GidReach reach;
  if (rank < 0 || rank >= int(topo.ranks.size())) return reach;
  for (const NicInfo& nic : topo.ranks[rank].nics)
    for (const PortInfo& port : nic.ports)
      for (const GidInfo& info : port.gids) {
        GidBytes gid{};
        if (!parseGidText(info.gid, gid.data())) continue;
        const bool ipv4 = info.ipv4.valid();
        if (!ipv4 && (gid[10] == 0xff && gid[11] == 0xff)) continue;  // IPv4 without a known prefix
        reach.own.push_back({nic.name, port.port, info.index, ipv4 ? 96 + info.ipv4.prefix : 64});
      }
  for (int r = 0; r < int(topo.ranks.size()); ++r) {
    if (r == rank || sameHost(topo, r, rank)) continue;
    std::vector<GidBytes> addresses = usableGids(topo.ranks[r]);
    if (!addresses.empty()) reach.peers.push_back({r, std::move(addresses)});  // else nothing to judge by
  }
  return reach;
}

bool openVerbsPorts(std::vector<VerbsPort>* out, std::string* why, const VerbsPortQuery& query) {
  out->clear();
  if (!verbsApiUsable(why)) {
    *why = "verbs wire: " + *why;
    return false;
  }
  GidPolicy policy;
  if (!gidPolicyFromEnv(&policy, why)) {
    *why = "verbs wire: " + *why;
    return false;
  }
  const VerbsApi& api = verbsApi();
  const std::string spec = query.hca.empty() ? hcaSpecFromEnv() : query.hca;
  const std::string& preferred = query.preferred;
  const size_t most = spec.empty() ? 1 : kMaxVerbsRails;
  HcaFilter filter = parseHcaFilter(spec);
  int count = 0;
  ibv_device** list = api.getDeviceList(&count);
  if (!list || count == 0) {
    if (list) api.freeDeviceList(list);
    *why = "verbs wire: no RDMA device";
    return false;
  }
  // The preferred device first (only where no HCA list was given), then the others in order.
  std::vector<int> order;
  for (int d = 0; d < count; ++d)
    if (spec.empty() && !preferred.empty() && preferred == api.getDeviceName(list[d])) order.insert(order.begin(), d);
    else order.push_back(d);
  std::string passedOver;  // ports that were active but had no usable GID
  for (size_t i = 0; i < order.size() && out->size() < most; ++i) {
    ibv_device* device = list[order[i]];
    std::string name = api.getDeviceName(device);
    ibv_context* context = api.openDevice(device);
    if (!context) continue;
    ibv_device_attr devAttr{};
    int ports = api.queryDevice(context, &devAttr) == 0 ? devAttr.phys_port_cnt : 0;
    bool taken = false;  // one port per device
    for (int p = 1; p <= ports && !taken; ++p) {
      ibv_port_attr attr{};
      if (!hcaFilterAccepts(filter, name, p) || api.queryPort(context, uint8_t(p), &attr) != 0 ||
          attr.state != IBV_PORT_ACTIVE)
        continue;
      std::string gidWhy;
      const int gid = choosePortGid(name, p, attr, policy, query.reach, &gidWhy);
      if (gid < 0) {
        passedOver += "; " + gidWhy;
        continue;
      }
      VerbsPort port;
      port.context = context;
      port.device = name;
      port.port = p;
      port.attr = attr;
      port.maxQpWr = devAttr.max_qp_wr;
      port.gidIndex = gid;
      out->push_back(port);
      taken = true;
    }
    if (!taken) api.closeDevice(context);
  }
  api.freeDeviceList(list);
  if (out->empty())
    *why = "verbs wire: no usable RDMA port" +
           (spec.empty() ? std::string() : " matching ROCENANTE_IB_HCA/NCCL_IB_HCA='" + spec + "'") + passedOver;
  return !out->empty();
}

bool openVerbsPort(VerbsPort* out, std::string* why, const std::string& preferred) {
  std::vector<VerbsPort> ports;
  VerbsPortQuery query;
  query.preferred = preferred;
  if (!openVerbsPorts(&ports, why, query)) return false;
  *out = ports[0];
  for (size_t i = 1; i < ports.size(); ++i) verbsApi().closeDevice(ports[i].context);
  return true;
}

bool verbsForkInit() {
  static std::once_flag once;
  static bool ok = true;
  std::call_once(once, [] {
    const int err = verbsApi().forkInit();
    if (err == 0) return;
    ok = false;
    RCN_WARN(RCN_LOG_TRANSPORT,
             "verbs wire: ibv_fork_init failed (%s): a fork() after registration may corrupt RDMA transfers",
             strerror(err));
  });
  return ok;
}

namespace {

// An opened port in words; closes it.
bool summarizePort(const VerbsPort& port, VerbsPortSummary* out, std::string* why) {
  ibv_gid gid{};
  const bool gidOk = verbsApi().queryGid(port.context, uint8_t(port.port), port.gidIndex, &gid) == 0;
  verbsApi().closeDevice(port.context);
  if (!gidOk) {
    *why = errnoText("ibv_query_gid", errno);
    return false;
  }
  char text[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  out->device = port.device;
  out->port = port.port;
  out->gidIndex = port.gidIndex;
  out->gid = text;
  out->mtuBytes = 128 << int(port.attr.active_mtu);  // IBV_MTU_256 is 1
  out->linkLayer = port.attr.link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "Ethernet (RoCE)";
  return true;
}

}  // namespace

bool verbsPortSummary(VerbsPortSummary* out, std::string* why, const std::string& preferred) {
  VerbsPort port;
  return openVerbsPort(&port, why, preferred) && summarizePort(port, out, why);
}

bool verbsRailSummaries(std::vector<VerbsPortSummary>* out, std::string* why) {
  out->clear();
  std::vector<VerbsPort> ports;
  if (!openVerbsPorts(&ports, why, VerbsPortQuery{})) return false;
  bool ok = true;
  for (const VerbsPort& port : ports) {
    VerbsPortSummary summary;
    if (ok && summarizePort(port, &summary, why)) out->push_back(summary);
    else if (ok) ok = false;
    else verbsApi().closeDevice(port.context);
  }
  return ok;
}

}  // namespace rcn

bool rcn::verbsDeviceAvailable() {
  static const bool available = [] {
    VerbsPort port;
    std::string why;
    if (!openVerbsPort(&port, &why)) return false;
    verbsApi().closeDevice(port.context);
    return true;
  }();
  return available;
}

#endif  // ROCENANTE_HAVE_IBVERBS
