// SPDX-License-Identifier: BSD-3-Clause
// Device/port filters with NCCL_IB_HCA's syntax and GID selection on fake
// sysfs trees (no RDMA hardware needed, built with or without libibverbs).
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>

#include "test_verbs_fake_sysfs.h"
#include "transport/wire/verbs_select.h"

using namespace rcn;
using namespace rcn::test;

TEST_CASE("HCA filter: prefixes, ports, exact names, exclusion", "[verbs]") {
  HcaFilter any = parseHcaFilter("");
  CHECK(hcaFilterAccepts(any, "mlx5_3", 2));

  HcaFilter list = parseHcaFilter("mlx5_0:1,mlx5_1");
  CHECK(hcaFilterAccepts(list, "mlx5_0", 1));
  CHECK_FALSE(hcaFilterAccepts(list, "mlx5_0", 2));
  CHECK(hcaFilterAccepts(list, "mlx5_1", 2));
  CHECK(hcaFilterAccepts(list, "mlx5_10", 1));  // prefix match, as NCCL does
  CHECK_FALSE(hcaFilterAccepts(list, "mlx5_2", 1));

  HcaFilter exact = parseHcaFilter("=mlx5_1");
  CHECK(hcaFilterAccepts(exact, "mlx5_1", 1));
  CHECK_FALSE(hcaFilterAccepts(exact, "mlx5_10", 1));

  HcaFilter exclude = parseHcaFilter("^mlx5_0");
  CHECK_FALSE(hcaFilterAccepts(exclude, "mlx5_0", 1));
  CHECK(hcaFilterAccepts(exclude, "mlx5_1", 1));

  HcaFilter excludePort = parseHcaFilter("^=mlx5_0:1");
  CHECK(excludePort.exclude);
  CHECK(excludePort.exact);
  CHECK_FALSE(hcaFilterAccepts(excludePort, "mlx5_0", 1));
  CHECK(hcaFilterAccepts(excludePort, "mlx5_0", 2));
}

TEST_CASE("HCA and GID index come from ROCENANTE_ first, then NCCL_", "[verbs]") {
  unsetenv("ROCENANTE_IB_HCA");
  unsetenv("ROCENANTE_IB_GID_INDEX");
  setenv("NCCL_IB_HCA", "mlx5_4", 1);
  setenv("NCCL_IB_GID_INDEX", "5", 1);
  CHECK(hcaSpecFromEnv() == "mlx5_4");
  CHECK(gidIndexFromEnv() == 5);
  setenv("ROCENANTE_IB_HCA", "^mlx5_4", 1);
  setenv("ROCENANTE_IB_GID_INDEX", "2", 1);
  CHECK(hcaSpecFromEnv() == "^mlx5_4");
  CHECK(gidIndexFromEnv() == 2);
  unsetenv("ROCENANTE_IB_HCA");
  unsetenv("ROCENANTE_IB_GID_INDEX");
  unsetenv("NCCL_IB_HCA");
  unsetenv("NCCL_IB_GID_INDEX");
  CHECK(hcaSpecFromEnv().empty());
  CHECK(gidIndexFromEnv() == -1);
}

TEST_CASE("GID text parses into network-order bytes", "[verbs]") {
  uint8_t gid[16];
  REQUIRE(parseGidText(kIpv4Gid, gid));
  CHECK(gid[10] == 0xff);
  CHECK(gid[11] == 0xff);
  CHECK(gid[12] == 10);
  CHECK(gid[15] == 1);
  CHECK_FALSE(parseGidText("fe80::1", gid));
}

TEST_CASE("GID selection picks the first RoCE v2 IPv4 GID", "[verbs]") {
  FakeSysfs fs;
  addConnectXGids(fs, "mlx5_0", 1);
  std::string why;
  CHECK(findGid(fs.root(), "mlx5_0", 1, GidPolicy{}, &why) == 3);
}

TEST_CASE("GID selection skips IPv6 and v1 entries and unreadable types", "[verbs]") {
  FakeSysfs fs;
  fs.addGid("mlx5_1", 1, 0, kLinkLocalGid, "RoCE v2");
  fs.addGid("mlx5_1", 1, 1, kIpv6Gid, "RoCE v2");
  fs.addGid("mlx5_1", 1, 2, kIpv4Gid, "");  // type unreadable
  fs.addGid("mlx5_1", 1, 3, kIpv4Gid, "IB/RoCE v1");
  fs.addGid("mlx5_1", 1, 4, kIpv4Gid, "RoCE v2");
  std::string why;
  CHECK(findGid(fs.root(), "mlx5_1", 1, GidPolicy{}, &why) == 4);
}

TEST_CASE("GID selection fails clearly when there is no RoCE v2 IPv4 GID", "[verbs]") {
  FakeSysfs fs;
  fs.addGid("mlx5_0", 1, 0, kLinkLocalGid, "IB/RoCE v1");
  fs.addGid("mlx5_0", 1, 1, kIpv6Gid, "RoCE v2");
  std::string why;
  CHECK(findGid(fs.root(), "mlx5_0", 1, GidPolicy{}, &why) == -1);
  CHECK(why.find("mlx5_0:1") != std::string::npos);
  CHECK(why.find("ROCENANTE_IB_GID_INDEX") != std::string::npos);
  CHECK(findGid(fs.root(), "mlx5_9", 1, GidPolicy{}, &why) == -1);  // no such device
}

TEST_CASE("GID selection honours the address family, range and RoCE version, never link-local", "[verbs]") {
  FakeSysfs fs;
  fs.addGid("mlx5_0", 1, 0, kLinkLocalGid, "RoCE v2");
  fs.addGid("mlx5_0", 1, 1, "0000:0000:0000:0000:0000:ffff:c0a8:0105", "RoCE v2");  // 192.168.1.5
  fs.addGid("mlx5_0", 1, 2, kIpv4Gid, "IB/RoCE v1");                                // 10.0.0.1
  fs.addGid("mlx5_0", 1, 3, kIpv4Gid, "RoCE v2");
  fs.addGid("mlx5_0", 1, 4, kIpv6Gid, "RoCE v2");
  std::string why;
  GidPolicy policy;
  CHECK(findGid(fs.root(), "mlx5_0", 1, policy, &why) == 1);
  REQUIRE(parseAddrRange("10.0.0.0/8", &policy, &why));
  CHECK(findGid(fs.root(), "mlx5_0", 1, policy, &why) == 3);
  policy.roceVersion = 1;
  CHECK(findGid(fs.root(), "mlx5_0", 1, policy, &why) == 2);
  GidPolicy v6;
  v6.ipv6 = true;
  CHECK(findGid(fs.root(), "mlx5_0", 1, v6, &why) == 4);        // fe80:: is never chosen
  CHECK_FALSE(parseAddrRange("2001:db8::/32", &policy, &why));  // IPv6 range, IPv4 family
  CHECK(why.find("AF_INET") != std::string::npos);
  REQUIRE(parseAddrRange("2001:db8::/32", &v6, &why));
  CHECK(findGid(fs.root(), "mlx5_0", 1, v6, &why) == 4);
  CHECK_FALSE(parseAddrRange("10.0.0.0/40", &policy, &why));
  CHECK_FALSE(parseAddrRange("ten/8", &policy, &why));

  FakeSysfs linkLocalOnly;
  linkLocalOnly.addGid("mlx5_2", 1, 0, kLinkLocalGid, "IB/RoCE v1");
  linkLocalOnly.addGid("mlx5_2", 1, 1, kLinkLocalGid, "RoCE v2");
  CHECK(findGid(linkLocalOnly.root(), "mlx5_2", 1, GidPolicy{}, &why) == -1);
  CHECK(why.find("link-local") != std::string::npos);
}

TEST_CASE("GID policy comes from ROCENANTE_ first, then NCCL_, and refuses bad values by name", "[verbs]") {
  unsetenv("ROCENANTE_IB_ADDR_FAMILY");
  unsetenv("ROCENANTE_IB_ADDR_RANGE");
  unsetenv("ROCENANTE_IB_ROCE_VERSION_NUM");
  GidPolicy policy;
  std::string why;
  setenv("NCCL_IB_ADDR_FAMILY", "AF_INET6", 1);
  setenv("NCCL_IB_ROCE_VERSION_NUM", "1", 1);
  REQUIRE(gidPolicyFromEnv(&policy, &why));
  CHECK(policy.ipv6);
  CHECK(policy.roceVersion == 1);
  setenv("ROCENANTE_IB_ADDR_FAMILY", "AF_INET", 1);
  setenv("NCCL_IB_ADDR_RANGE", "10.1.0.0/16", 1);
  REQUIRE(gidPolicyFromEnv(&policy, &why));
  CHECK_FALSE(policy.ipv6);
  CHECK(policy.prefixBits == 96 + 16);
  setenv("NCCL_IB_ADDR_FAMILY", "AF_UNIX", 1);
  unsetenv("ROCENANTE_IB_ADDR_FAMILY");
  CHECK_FALSE(gidPolicyFromEnv(&policy, &why));
  CHECK(why.find("NCCL_IB_ADDR_FAMILY='AF_UNIX'") != std::string::npos);
  unsetenv("NCCL_IB_ADDR_FAMILY");
  setenv("NCCL_IB_ROCE_VERSION_NUM", "3", 1);
  CHECK_FALSE(gidPolicyFromEnv(&policy, &why));
  CHECK(why.find("NCCL_IB_ROCE_VERSION_NUM") != std::string::npos);
  for (const char* name : {"ROCENANTE_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM"})
    unsetenv(name);
}
