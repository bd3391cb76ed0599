// SPDX-License-Identifier: BSD-3-Clause
// Host identity (name + boot id, so two containers on one machine count as one
// host and a rebooted machine as a new one), the peer-memory kernel module,
// and the plain IPv4 interfaces the tcp wire would use.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "core/check.h"
#include "topology/sysfs.h"
#include "topology/topology.h"

namespace rcn {

// Fixture roots describe the host in files; the real root asks the kernel.
static bool isRealRoot(const TopoProbeOptions& opt) { return opt.root.empty() || opt.root == "/"; }

static std::string hostName(const TopoProbeOptions& opt) {
  std::string name;
  if (!isRealRoot(opt)) {
    readFirstLine(joinPath(opt.root, "etc/hostname"), &name);
    return name;
  }
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) == 0) name = buf;
  return name;
}

// nvidia_peermem (in-tree since driver 470) or the older nv_peer_mem lets the
// NIC DMA into GPU memory through ibv_reg_mr on device pointers.
static std::string peerMemModule(const std::string& root) {
  std::string text;
  if (!readWholeFile(joinPath(root, "proc/modules"), &text)) return "";
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::string name = line.substr(0, line.find(' '));
    if (name == "nvidia_peermem" || name == "nv_peer_mem") return name;
  }
  return "";
}

rcnResult_t discoverHost(const TopoProbeOptions& opt, RankTopo* out) {
  out->host = hostName(opt);
  if (out->host.empty()) out->host = "unknown-host";
  std::string bootId;
  if (readFirstLine(joinPath(opt.root, "proc/sys/kernel/random/boot_id"), &bootId)) out->bootId = bootId;
  out->peerMemModule = peerMemModule(opt.root);
  return rcnSuccess;
}

// Interfaces that exist on every host with the same address (container
// bridges) say nothing about reachability between hosts.
static bool ignoredInterface(const std::string& name) {
  return name == "lo" || name.rfind("docker", 0) == 0 || name.rfind("virbr", 0) == 0 ||
         name.rfind("br-", 0) == 0;
}

static int prefixOfMask(uint32_t mask) {
  int n = 0;
  while (mask & 0x80000000u) {
    n++;
    mask <<= 1;
  }
  return n;
}

// Fixture trees list interfaces in <root>/ifaddrs.txt: "name a.b.c.d/prefix" per line.
static rcnResult_t fixtureNetifs(const std::string& root, std::vector<NetIf>* out) {
  std::string text;
  if (!readWholeFile(joinPath(root, "ifaddrs.txt"), &text)) return rcnSuccess;
  std::istringstream lines(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(lines, line)) {
    lineNo++;
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    NetIf nif;
    std::string addr;
    fields >> nif.name >> addr;
    RCN_ARG_CHECK(parseIpv4Net(addr, &nif.ipv4), "%s line %d: bad IPv4 address '%s'",
                  joinPath(root, "ifaddrs.txt").c_str(), lineNo, addr.c_str());
    out->push_back(nif);
  }
  return rcnSuccess;
}

rcnResult_t discoverNetifs(const TopoProbeOptions& opt, RankTopo* out) {
  out->netifs.clear();
  if (!isRealRoot(opt)) return fixtureNetifs(opt.root, &out->netifs);
  ifaddrs* list = nullptr;
  RCN_SYS_CHECK(getifaddrs(&list), "getifaddrs");
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET || !ifa->ifa_netmask) continue;
    if (!(ifa->ifa_flags & IFF_UP) || ignoredInterface(ifa->ifa_name)) continue;
    NetIf nif;
    nif.name = ifa->ifa_name;
    nif.ipv4.addr = ntohl(reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr.s_addr);
    nif.ipv4.prefix = prefixOfMask(ntohl(reinterpret_cast<sockaddr_in*>(ifa->ifa_netmask)->sin_addr.s_addr));
    out->netifs.push_back(nif);
  }
  freeifaddrs(list);
  return rcnSuccess;
}

}  // namespace rcn
