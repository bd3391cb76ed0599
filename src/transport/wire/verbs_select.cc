// SPDX-License-Identifier: BSD-3-Clause
#include "transport/wire/verbs_select.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <arpa/inet.h>

#include "core/params.h"

namespace rcn {

HcaFilter parseHcaFilter(const std::string& spec) {
  HcaFilter filter;
  std::string rest = spec;
  if (!rest.empty() && rest[0] == '^') {
    filter.exclude = true;
    rest = rest.substr(1);
  }
  if (!rest.empty() && rest[0] == '=') {
    filter.exact = true;
    rest = rest.substr(1);
  }
  std::stringstream items(rest);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    HcaFilter::Entry entry;
    size_t colon = item.find(':');
    entry.name = item.substr(0, colon);
    if (colon != std::string::npos) entry.port = std::atoi(item.c_str() + colon + 1);
    filter.entries.push_back(entry);
  }
  return filter;
}

bool hcaFilterAccepts(const HcaFilter& filter, const std::string& device, int port) {
  if (filter.entries.empty()) return true;
  bool listed = false;
  for (const HcaFilter::Entry& e : filter.entries) {
    bool nameHit = filter.exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (nameHit && (e.port < 0 || e.port == port)) listed = true;
  }
  return filter.exclude ? !listed : listed;
}

std::string hcaSpecFromEnv() {
  std::string spec = paramStr(ParamId::IbHca);
  const char* nccl = std::getenv("NCCL_IB_HCA");
  if (spec.empty() && nccl) spec = nccl;
  return spec;
}

int gidIndexFromEnv() {
  int64_t index = paramInt(ParamId::IbGidIndex);
  const char* nccl = std::getenv("NCCL_IB_GID_INDEX");
  if (index < 0 && nccl && *nccl) index = std::atoi(nccl);
  return int(index);
}

namespace {

// ROCENANTE_<row> when set (its range checked by the table), else ncclName
// when set (checked here), else fallback.
bool ibSetting(ParamId id, const char* ncclName, int lo, int hi, int fallback, int* out, std::string* why) {
  const int64_t own = paramInt(id);
  if (own >= lo) {
    *out = int(own);
    return true;
  }
  if (own >= 0) {  // inside the row's range, which starts at -1, but below this setting's
    *why = "ROCENANTE_" + std::string(paramTable()[size_t(id)].name) + "=" + std::to_string(own) + " is below " +
           std::to_string(lo);
    return false;
  }
  const char* nccl = std::getenv(ncclName);
  if (!nccl || !*nccl) {
    *out = fallback;
    return true;
  }
  int64_t value = 0;
  std::string parseWhy;
  if (!parseIntText(nccl, &value, &parseWhy) || value < lo || value > hi) {
    *why = std::string(ncclName) + "='" + nccl + "' is not an integer in " + std::to_string(lo) + ".." +
           std::to_string(hi);
    return false;
  }
  *out = int(value);
  return true;
}

}  // namespace

bool ibQpParamsFromEnv(IbQpParams* out, std::string* why) {
  return ibSetting(ParamId::IbTimeout, "NCCL_IB_TIMEOUT", 1, 31, 20, &out->timeout, why) &&
         ibSetting(ParamId::IbRetryCnt, "NCCL_IB_RETRY_CNT", 0, 7, 7, &out->retryCnt, why) &&
         ibSetting(ParamId::IbTc, "NCCL_IB_TC", 0, 255, 0, &out->trafficClass, why) &&
         ibSetting(ParamId::IbSl, "NCCL_IB_SL", 0, 15, 0, &out->serviceLevel, why);
}

bool parseGidText(const std::string& text, uint8_t gid[16]) {
  unsigned groups[8];
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x:%x:%x", &groups[0], &groups[1], &groups[2],
                  &groups[3], &groups[4], &groups[5], &groups[6], &groups[7]) != 8)
    return false;
  for (int i = 0; i < 8; ++i) {
    if (groups[i] > 0xffff) return false;
    gid[2 * i] = uint8_t(groups[i] >> 8);
    gid[2 * i + 1] = uint8_t(groups[i] & 0xff);
  }
  return true;
}

namespace {

bool readLine(const std::string& path, std::string* line) {
  std::ifstream in(path);
  return in && std::getline(in, *line);
}

bool isIpv4Mapped(const uint8_t gid[16]) {
  for (int i = 0; i < 10; ++i)
    if (gid[i]) return false;
  return gid[10] == 0xff && gid[11] == 0xff;
}

// The first prefixBits bits of a and b are equal.
bool samePrefix(const uint8_t a[16], const uint8_t b[16], int prefixBits) {
  for (int bit = 0; bit < prefixBits; ++bit) {
    const uint8_t mask = uint8_t(0x80 >> (bit % 8));
    if ((a[bit / 8] & mask) != (b[bit / 8] & mask)) return false;
  }
  return true;
}

bool inRange(const uint8_t gid[16], const GidPolicy& policy) {
  return samePrefix(gid, policy.range, policy.prefixBits);
}

std::string addressText(const uint8_t gid[16]) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (isIpv4Mapped(gid)) inet_ntop(AF_INET, gid + 12, text, sizeof text);
  else inet_ntop(AF_INET6, gid, text, sizeof text);
  return text;
}

// ROCENANTE_<row> when set, else ncclName, else "".
std::string stringSetting(ParamId id, const char* ncclName) {
  std::string own = paramStr(id);
  if (!own.empty()) return own;
  const char* nccl = std::getenv(ncclName);
  return nccl ? nccl : "";
}

bool typeMatches(const std::string& type, int version) {
  return type.find(version == 1 ? "RoCE v1" : "RoCE v2") != std::string::npos;
}

}  // namespace

bool gidIsLinkLocalOrZero(const uint8_t gid[16]) {
  if (gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80) return true;
  for (int i = 0; i < 16; ++i)
    if (gid[i]) return false;
  return true;
}

std::string gidMissesPeer(const GidReach& reach, const std::string& device, int port, int index,
                          const uint8_t gid[16]) {
  int prefixBits = -1;
  for (const GidReach::Own& own : reach.own)
    if (own.device == device && own.port == port && own.index == index) prefixBits = own.prefixBits;
  if (prefixBits < 0) return "";  // the topology does not know this GID's subnet
  for (const GidReach::Peer& peer : reach.peers) {
    bool reached = false;
    for (const GidBytes& address : peer.addresses) reached = reached || samePrefix(gid, address.data(), prefixBits);
    if (!reached)
      return "GID " + std::to_string(index) + " (" + addressText(gid) + "/" +
             std::to_string(isIpv4Mapped(gid) ? prefixBits - 96 : prefixBits) + ") of " + device + ":" +
             std::to_string(port) + " does not reach rank " + std::to_string(peer.rank) + "'s subnets";
  }
  return "";
}

bool parseAddrRange(const std::string& text, GidPolicy* out, std::string* why) {
  const size_t slash = text.find('/');
  const std::string address = text.substr(0, slash);
  int64_t bits = -1;
  std::string parseWhy;
  if (slash == std::string::npos || !parseIntText(text.substr(slash + 1), &bits, &parseWhy)) bits = -1;
  uint8_t bytes[16] = {};
  const bool v4 = inet_pton(AF_INET, address.c_str(), bytes + 12) == 1;
  const bool v6 = !v4 && inet_pton(AF_INET6, address.c_str(), bytes) == 1;
  if ((!v4 && !v6) || bits < 0 || bits > (v4 ? 32 : 128)) {
    *why = "'" + text + "' is not an address range such as 10.0.0.0/16 or 2001:db8::/32";
    return false;
  }
  if (v4 == out->ipv6) {
    *why = "'" + text + "' is an " + (v4 ? "IPv4" : "IPv6") + " range but the address family is " +
           (out->ipv6 ? "AF_INET6" : "AF_INET");
    return false;
  }
  if (v4) bytes[10] = bytes[11] = 0xff;
  std::memcpy(out->range, bytes, 16);
  out->prefixBits = int(bits) + (v4 ? 96 : 0);
  return true;
}

bool gidPolicyFromEnv(GidPolicy* out, std::string* why) {
  *out = GidPolicy{};
  const std::string family = stringSetting(ParamId::IbAddrFamily, "NCCL_IB_ADDR_FAMILY");
  if (family == "AF_INET6") out->ipv6 = true;
  else if (!family.empty() && family != "AF_INET") {
    *why = "ROCENANTE_IB_ADDR_FAMILY/NCCL_IB_ADDR_FAMILY='" + family + "' is neither AF_INET nor AF_INET6";
    return false;
  }
  const std::string range = stringSetting(ParamId::IbAddrRange, "NCCL_IB_ADDR_RANGE");
  if (!range.empty() && !parseAddrRange(range, out, why)) {
    *why = "ROCENANTE_IB_ADDR_RANGE/NCCL_IB_ADDR_RANGE: " + *why;
    return false;
  }
  int version = 2;
  if (!ibSetting(ParamId::IbRoceVersionNum, "NCCL_IB_ROCE_VERSION_NUM", 1, 2, 2, &version, why)) return false;
  out->roceVersion = version;
  return true;
}

int findGid(const std::string& sysfsRoot, const std::string& device, int port, const GidPolicy& policy,
            std::string* why, const GidReach* reach) {
  std::string portDir = sysfsRoot + "/" + device + "/ports/" + std::to_string(port);
  int seen = 0;
  std::string unreachable;  // GIDs the policy accepted whose subnet misses a peer
  // Devices expose a few to a few hundred GIDs; unpopulated entries read as
  // zeros (and their type file fails to read), so scan a fixed range.
  for (int i = 0; i < 1024; ++i) {
    std::string gidText, type;
    if (!readLine(portDir + "/gids/" + std::to_string(i), &gidText)) break;
    ++seen;
    uint8_t gid[16];
    if (!parseGidText(gidText, gid) || gidIsLinkLocalOrZero(gid) || isIpv4Mapped(gid) == policy.ipv6 ||
        !inRange(gid, policy))
      continue;
    if (!readLine(portDir + "/gid_attrs/types/" + std::to_string(i), &type) || !typeMatches(type, policy.roceVersion))
      continue;
    const std::string misses = reach ? gidMissesPeer(*reach, device, port, i, gid) : "";
    if (misses.empty()) return i;
    unreachable += "; " + misses;
  }
  if (why)
    *why = "no RoCE v" + std::to_string(policy.roceVersion) + (policy.ipv6 ? " IPv6" : " IPv4") +
           (policy.prefixBits ? " in the address range" : "") + " GID (link-local ones never count) among " +
           std::to_string(seen) + " GIDs of " + device + ":" + std::to_string(port) + " (" + portDir + ")" +
           unreachable + "; set ROCENANTE_IB_GID_INDEX";
  return -1;
}

}  // namespace rcn
