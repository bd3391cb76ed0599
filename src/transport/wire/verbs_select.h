// SPDX-License-Identifier: BSD-3-Clause
// Choosing the RDMA device, port and GID the verbs wire uses. Pure logic over
// names and sysfs files, so it is tested without hardware (and built without
// libibverbs).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace rcn {

// NCCL_IB_HCA syntax: "mlx5_0:1,mlx5_1" (prefix match, optional :port),
// "=mlx5_0" (exact names), "^mlx5_2" (every device except these).
struct HcaFilter {
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;  // empty: every device
};

HcaFilter parseHcaFilter(const std::string& spec);
bool hcaFilterAccepts(const HcaFilter& filter, const std::string& device, int port);

// ROCENANTE_IB_HCA, falling back to NCCL_IB_HCA.
std::string hcaSpecFromEnv();
// ROCENANTE_IB_GID_INDEX, falling back to NCCL_IB_GID_INDEX; -1 when neither is set.
int gidIndexFromEnv();

// The queue pairs' transport settings, each from its ROCENANTE_IB_* row, else
// NCCL's variable of the same name, else NCCL's default (timeout 20, retry
// count 7, traffic class 0, service level 0). A malformed or out-of-range
// NCCL_IB_* value is refused, naming it.
struct IbQpParams {
  int timeout = 20;
  int retryCnt = 7;
  int trafficClass = 0;
  int serviceLevel = 0;
};
bool ibQpParamsFromEnv(IbQpParams* out, std::string* why);

// Which GIDs of a RoCE port may be used, as NCCL reads them: the address
// family (NCCL_IB_ADDR_FAMILY: AF_INET, the default, or AF_INET6), a CIDR
// range the address must fall in (NCCL_IB_ADDR_RANGE, default any) and the
// RoCE version (NCCL_IB_ROCE_VERSION_NUM, default 2); each ROCENANTE_IB_*
// first. Link-local (fe80::/10) and all-zero GIDs are never chosen: they
// do not route between hosts.
struct GidPolicy {
  bool ipv6 = false;
  uint8_t range[16] = {};  // the range's prefix as a GID (IPv4 as ::ffff:a.b.c.d)
  int prefixBits = 0;      // 0: any address
  int roceVersion = 2;
};
// False with why naming the variable when one is malformed.
bool gidPolicyFromEnv(GidPolicy* out, std::string* why);
// "10.0.0.0/16" or "2001:db8::/32" into out's range (which must match out's family).
bool parseAddrRange(const std::string& text, GidPolicy* out, std::string* why);

using GidBytes = std::array<uint8_t, 16>;

// Whether a GID's netdev can reach the peers: a GID reaches a peer when one
// of the peer's RDMA addresses lies in the GID's own subnet (its netdev's
// address and prefix). Built from the agreed topology (gidReachFromTopo in
// verbs_device.cc); a GID or peer the topology says nothing about is not judged.
struct GidReach {
  struct Own {
    std::string device;
    int port = 0;
    int index = 0;
    int prefixBits = 0;  // in GID bits: an IPv4 /24 is 96 + 24
  };
  struct Peer {
    int rank = 0;
    std::vector<GidBytes> addresses;  // its usable GIDs (IPv4 as ::ffff:a.b.c.d)
  };
  std::vector<Own> own;
  std::vector<Peer> peers;  // only peers on other hosts
};

// "" when gid (of device:port, index) reaches every peer of reach, else why
// not, naming the first peer it misses.
std::string gidMissesPeer(const GidReach& reach, const std::string& device, int port, int index, const uint8_t gid[16]);

// The first GID index of device:port that the policy accepts, read from
// <sysfsRoot>/<device>/ports/<port>/gids/<i> and .../gid_attrs/types/<i>,
// and that reaches every peer of reach (when given). Returns -1 with *why
// set when there is none.
int findGid(const std::string& sysfsRoot, const std::string& device, int port, const GidPolicy& policy,
            std::string* why, const GidReach* reach = nullptr);

// Whether a GID is link-local (fe80::/10) or all zeros: it never routes between hosts.
bool gidIsLinkLocalOrZero(const uint8_t gid[16]);

// Parses sysfs's "fe80:0000:...:0001" text into 16 bytes.
bool parseGidText(const std::string& text, uint8_t gid[16]);

}  // namespace rcn
