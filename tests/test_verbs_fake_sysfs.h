// SPDX-License-Identifier: BSD-3-Clause
// A fake /sys/class/infiniband tree in a temporary directory, for GID
// selection tests: <root>/<dev>/ports/<port>/gids/<i> and gid_attrs/types/<i>.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/stat.h>

namespace rcn::test {

class FakeSysfs {
 public:
  FakeSysfs() {
    char dir[] = "/tmp/rcn-sysfs-XXXXXX";
    root_ = mkdtemp(dir) ? dir : "";
  }
  ~FakeSysfs() {
    if (std::system(("rm -rf '" + root_ + "'").c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", root_.c_str());
  }
  const std::string& root() const { return root_; }

  // type empty: the types file is absent (sysfs fails to read unpopulated entries).
  void addGid(const std::string& dev, int port, int index, const std::string& gid, const std::string& type) {
    std::string portDir = root_ + "/" + dev + "/ports/" + std::to_string(port);
    mkdirs(portDir + "/gids");
    mkdirs(portDir + "/gid_attrs/types");
    std::ofstream(portDir + "/gids/" + std::to_string(index)) << gid << "\n";
    if (!type.empty()) std::ofstream(portDir + "/gid_attrs/types/" + std::to_string(index)) << type << "\n";
  }

 private:
  static void mkdirs(const std::string& path) {
    for (size_t i = 1; i <= path.size(); ++i)
      if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
  }
  std::string root_;
};

constexpr const char* kLinkLocalGid = "fe80:0000:0000:0000:0202:c9ff:fe00:0001";
constexpr const char* kIpv4Gid = "0000:0000:0000:0000:0000:ffff:0a00:0001";   // ::ffff:10.0.0.1
constexpr const char* kIpv6Gid = "2001:0db8:0000:0000:0000:0000:0000:0001";
constexpr const char* kZeroGid = "0000:0000:0000:0000:0000:0000:0000:0000";

// The usual ConnectX layout: v1 and v2 for the link-local address, then for
// the IPv4 address. The first RoCE v2 IPv4 GID is index 3.
inline void addConnectXGids(FakeSysfs& fs, const std::string& dev, int port) {
  fs.addGid(dev, port, 0, kLinkLocalGid, "IB/RoCE v1");
  fs.addGid(dev, port, 1, kLinkLocalGid, "RoCE v2");
  fs.addGid(dev, port, 2, kIpv4Gid, "IB/RoCE v1");
  fs.addGid(dev, port, 3, kIpv4Gid, "RoCE v2");
  fs.addGid(dev, port, 4, kZeroGid, "");
}

}  // namespace rcn::test
