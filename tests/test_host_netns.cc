// SPDX-License-Identifier: BSD-3-Clause
// The host backend over the tcp wire between ranks in separate network
// namespaces, joined by veth pairs to a bridge in a third namespace (the
// switch), so nothing goes over loopback. Skips where creating a namespace
// is not permitted (unprivileged CI containers).
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "test_host_util.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 3;

bool sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

// Namespace and interface names carry the pid so parallel runs do not collide
// (interface names are limited to 15 characters).
struct Netns {
  std::string tag = std::to_string(getpid() % 100000);
  std::string sw() const { return "rcnsw" + tag; }
  std::string ns(int r) const { return "rcn" + std::to_string(r) + "n" + tag; }
  std::string ifname(int r) const { return "rv" + std::to_string(r); }

  // The switch namespace first: where that is not permitted, the test skips.
  bool addSwitch() const { return sh("ip netns add " + sw()); }
  // Then its bridge, and each rank's namespace wired to it.
  bool connectRanks() {
    bool ok = sh("ip -n " + sw() + " link add br0 type bridge") &&
              sh("ip -n " + sw() + " link set br0 up");
    for (int r = 0; r < kRanks && ok; ++r) {
      std::string peer = "rs" + std::to_string(r) + "x" + tag;
      ok = sh("ip netns add " + ns(r)) &&
           sh("ip link add " + peer + " type veth peer name " + ifname(r) + "x" + tag) &&
           sh("ip link set " + peer + " netns " + sw()) &&
           sh("ip link set " + ifname(r) + "x" + tag + " netns " + ns(r)) &&
           sh("ip -n " + ns(r) + " link set " + ifname(r) + "x" + tag + " name " + ifname(r)) &&
           sh("ip -n " + sw() + " link set " + peer + " master br0") &&
           sh("ip -n " + sw() + " link set " + peer + " up") &&
           sh("ip -n " + ns(r) + " addr add 10.77.0." + std::to_string(r + 1) + "/24 dev " + ifname(r)) &&
           sh("ip -n " + ns(r) + " link set " + ifname(r) + " up") &&
           sh("ip -n " + ns(r) + " link set lo up");
    }
    return ok;
  }
  ~Netns() {
    for (int r = 0; r < kRanks; ++r) sh("ip netns del " + ns(r));
    sh("ip netns del " + sw());
  }
};

bool enterNetns(const std::string& name) {
  int fd = open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = setns(fd, CLONE_NEWNET) == 0;
  close(fd);
  return ok;
}

int runRank(const Netns& net, int rank, int idPipe[2]) {
  if (!enterNetns(net.ns(rank))) return 60;
  setenv("ROCENANTE_SOCKET_IFNAME", net.ifname(rank).c_str(), 1);
  setenv("ROCENANTE_WIRE", "tcp", 1);
  rcnUniqueId id;
  if (rank == 0) {  // the root must listen inside rank 0's namespace
    if (bootstrapGetUniqueId(&id) != rcnSuccess) return 61;
    for (int r = 1; r < kRanks; ++r)
      if (write(idPipe[1], &id, sizeof id) != ssize_t(sizeof id)) return 62;
  } else if (read(idPipe[0], &id, sizeof id) != ssize_t(sizeof id)) {
    return 63;
  }
  auto bs = joinBootstrap(id, rank, kRanks);
  if (!bs) return 64;
  std::unique_ptr<FastPath> path;
  std::string why;
  if (createHostPath(hostContext(bs.get(), 8192, 10000), &path, &why) != rcnSuccess || !path) return 65;
  int failures = 0;
  uint64_t seed = 7;
  for (rcnDataType_t t : {rcnFloat32, rcnBfloat16, rcnInt32}) {
    for (size_t count : {size_t(1), size_t(1000), size_t(20000)}) {
      ++seed;
      auto in = rankInput(seed, rank, kRanks, count, t, rcnSum);
      std::vector<uint8_t> out(in.size(), kPoisonByte);
      if (path->allReduce(in.data(), out.data(), count, t, rcnSum, nullptr) != rcnSuccess) return 66;
      failures += checkAgainstReference(out.data(), seed, kRanks, count, t, rcnSum, "netns") != 0;
    }
  }
  return failures;
}

}  // namespace

TEST_CASE("host backend over tcp across network namespaces and a bridge", "[host][tcp][netns]") {
  Netns net;
  if (!net.addSwitch()) SKIP("'ip netns add' is not permitted here");
  REQUIRE(net.connectRanks());
  int idPipe[2];
  REQUIRE(pipe(idPipe) == 0);
  auto outcomes = runRanks(kRanks, [&](int rank) { return runRank(net, rank, idPipe); }, 60);
  close(idPipe[0]);
  close(idPipe[1]);
  checkRanks(outcomes);
}
