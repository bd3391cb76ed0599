// SPDX-License-Identifier: BSD-3-Clause
// Names and small value helpers of the topology types.
#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>

#include "topology/topology.h"

namespace rcn {

const char* pciDistanceName(PciDistance d) {
  switch (d) {
    case PciDistance::Pix: return "PIX";
    case PciDistance::Pxb: return "PXB";
    case PciDistance::Phb: return "PHB";
    case PciDistance::Sys: return "SYS";
    default: return "unknown";
  }
}

bool parsePciDistance(const std::string& text, PciDistance* out) {
  for (PciDistance d : {PciDistance::Unknown, PciDistance::Pix, PciDistance::Pxb, PciDistance::Phb,
                        PciDistance::Sys}) {
    if (text == pciDistanceName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

const char* supportName(Support s) {
  switch (s) {
    case Support::No: return "no";
    case Support::Yes: return "yes";
    default: return "unknown";
  }
}

static std::string dottedQuad(uint32_t addr) {
  char buf[32];
  snprintf(buf, sizeof buf, "%u.%u.%u.%u", (addr >> 24) & 255, (addr >> 16) & 255,
           (addr >> 8) & 255, addr & 255);
  return buf;
}

std::string Ipv4Net::text() const { return dottedQuad(addr) + "/" + std::to_string(prefix); }

std::string Ipv4Net::subnetText() const {
  uint32_t mask = prefix <= 0 ? 0 : (prefix >= 32 ? ~0u : ~0u << (32 - prefix));
  return dottedQuad(addr & mask) + "/" + std::to_string(prefix);
}

bool parseIpv4Net(const std::string& text, Ipv4Net* out) {
  std::string host = text;
  int prefix = 32;
  size_t slash = text.find('/');
  if (slash != std::string::npos) {
    host = text.substr(0, slash);
    std::string p = text.substr(slash + 1);
    char* end = nullptr;
    long v = strtol(p.c_str(), &end, 10);
    if (p.empty() || *end != '\0' || v < 0 || v > 32) return false;
    prefix = static_cast<int>(v);
  }
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) != 1) return false;
  out->addr = ntohl(a.s_addr);
  out->prefix = prefix;
  return out->addr != 0;
}

}  // namespace rcn
