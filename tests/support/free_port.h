// SPDX-License-Identifier: BSD-3-Clause
// A TCP port on the loopback interface that was free a moment ago, for tests
// that need an agreed rendezvous port (MASTER_PORT). It is drawn at random
// below the kernel's ephemeral range: a port the kernel handed out (bind to
// port 0, or the local end of a connect) was taken again by concurrently
// running tests under ctest -j, and rank 0 then failed to listen.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace rcn::test {

inline bool portBindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// 0 when no port could be bound.
inline int freePort() {
  int ephemeralLow = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeralLow;
  if (ephemeralLow <= 10000 + 1000) ephemeralLow = 32768;
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(10000, ephemeralLow - 1);
  for (int attempt = 0; attempt < 100; ++attempt) {
    int port = pick(rng);
    if (portBindable(port)) return port;
  }
  return 0;
}

}  // namespace rcn::test
