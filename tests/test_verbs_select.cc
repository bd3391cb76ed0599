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
  CHECK(findRoceV2Ipv4Gid(fs.root(), "mlx5_0", 1, &why) == 3);
}

TEST_CASE("GID selection skips IPv6 and v1 entries and unreadable types", "[verbs]") {
  FakeSysfs fs;
  fs.addGid("mlx5_1", 1, 0, kLinkLocalGid, "RoCE v2");
  fs.addGid("mlx5_1", 1, 1, kIpv6Gid, "RoCE v2");
  fs.addGid("mlx5_1", 1, 2, kIpv4Gid, "");  // type unreadable
  fs.addGid("mlx5_1", 1, 3, kIpv4Gid, "IB/RoCE v1");
  fs.addGid("mlx5_1", 1, 4, kIpv4Gid, "RoCE v2");
  std::string why;
  CHECK(findRoceV2Ipv4Gid(fs.root(), "mlx5_1", 1, &why) == 4);
}

TEST_CASE("GID selection fails clearly when there is no RoCE v2 IPv4 GID", "[verbs]") {
  FakeSysfs fs;
  fs.addGid("mlx5_0", 1, 0, kLinkLocalGid, "IB/RoCE v1");
  fs.addGid("mlx5_0", 1, 1, kIpv6Gid, "RoCE v2");
  std::string why;
  CHECK(findRoceV2Ipv4Gid(fs.root(), "mlx5_0", 1, &why) == -1);
  CHECK(why.find("mlx5_0:1") != std::string::npos);
  CHECK(why.find("ROCENANTE_IB_GID_INDEX") != std::string::npos);
  CHECK(findRoceV2Ipv4Gid(fs.root(), "mlx5_9", 1, &why) == -1);  // no such device
}
