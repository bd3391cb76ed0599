// SPDX-License-Identifier: BSD-3-Clause
// Passing descriptors between processes over abstract Unix sockets
// (src/transport/p2p/fd_passing.h), as the p2p transport shares cuMem
// handles, with pipes standing in for GPU memory. CPU only.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/bootstrap.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "transport/p2p/fd_passing.h"

using namespace rcn;
using namespace rcn::test;

namespace {

// Each rank passes the read end of a pipe holding its rank number; every
// rank must read each peer's number from the descriptor it received. Rank
// `without` (if any) has no descriptor to give (-1, a failed export): its
// peers must receive -1 for it, not some other descriptor.
int exchangeRank(const rcnUniqueId& id, int rank, int nranks, bool corruptToken, int without = -1) {
  std::unique_ptr<Bootstrap> bootstrap;
  if (bootstrapInitTcp(id, rank, nranks, &bootstrap) != rcnSuccess) return 10;
  FdListener listener;
  std::string why;
  if (listener.open(&why) != rcnSuccess) return 11;
  std::vector<FdEndpoint> endpoints(nranks);
  endpoints[rank] = listener.endpoint();
  if (bootstrap->allGather(endpoints.data(), sizeof(FdEndpoint)) != rcnSuccess) return 12;
  if (corruptToken && rank == 0) endpoints[1].token ^= 1;  // rank 0 presents a wrong token to rank 1
  int fds[2];
  if (pipe(fds) != 0) return 13;
  // One copy per peer: the peers share the pipe and each reads one.
  const int32_t mine = 1000 + rank;
  for (int p = 1; p < nranks; ++p)
    if (write(fds[1], &mine, sizeof mine) != sizeof mine) return 14;
  std::vector<int> received;
  const int given = rank == without ? -1 : fds[0];
  rcnResult_t res = exchangeFds(listener, rank, endpoints, given, deadlineAfterMs(3000), &received, &why);
  if (corruptToken) {
    // Rank 1 must refuse rank 0's connection; rank 0 then fails too. Both within the deadline.
    if ((rank == 0 || rank == 1) && res == rcnSuccess) return 20;
    return 0;
  }
  if (res != rcnSuccess) {
    std::fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
    return 15;
  }
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    if (p == without) {
      if (received[p] != -1) return 17;
      continue;
    }
    int32_t theirs = 0;
    if (read(received[p], &theirs, sizeof theirs) != sizeof theirs || theirs != 1000 + p) return 16;
    close(received[p]);
  }
  return 0;
}

}  // namespace

TEST_CASE("descriptors reach every peer, any rank count", "[p2p][fd]") {
  for (int nranks : {2, 3, 5}) {
    rcnUniqueId id;
    REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
    auto outcomes = runRanks(nranks, [&](int rank) { return exchangeRank(id, rank, nranks, false); }, 60);
    std::string report;
    INFO(nranks << " ranks");
    if (!allSucceeded(outcomes, &report)) FAIL(report);
  }
}

TEST_CASE("a rank without a descriptor still serves its peers, who receive -1 for it", "[p2p][fd]") {
  for (int without : {0, 1, 2}) {
    rcnUniqueId id;
    REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
    checkRanks(runRanks(3, [&](int rank) { return exchangeRank(id, rank, 3, false, without); }, 60),
               "rank " + std::to_string(without) + " has none");
  }
}

TEST_CASE("a connection with the wrong token is refused within the deadline", "[p2p][fd]") {
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  auto outcomes = runRanks(2, [&](int rank) { return exchangeRank(id, rank, 2, true); }, 60);
  std::string report;
  if (!allSucceeded(outcomes, &report)) FAIL(report);
}

TEST_CASE("a process of another user that knows the socket's name is refused", "[p2p][fd]") {
  // Abstract sockets have no permissions, and their names are listed in
  // /proc/net/unix: anyone on the host could connect and be handed GPU
  // memory. Here the stranger learns the name through the bootstrap, then
  // drops to another user before it connects.
  if (geteuid() != 0) SKIP("needs root, to run one rank as another user");
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(
      2,
      [&](int rank) {
        std::unique_ptr<Bootstrap> bootstrap;
        RANK_EXPECT(bootstrapInitTcp(id, rank, 2, &bootstrap) == rcnSuccess);
        FdListener listener;
        std::string why;
        RANK_EXPECT(listener.open(&why) == rcnSuccess);
        std::vector<FdEndpoint> endpoints(2);
        endpoints[rank] = listener.endpoint();
        RANK_EXPECT(bootstrap->allGather(endpoints.data(), sizeof(FdEndpoint)) == rcnSuccess);
        int fds[2];
        RANK_EXPECT(pipe(fds) == 0);
        if (rank == 0) RANK_EXPECT(setgid(65534) == 0 && setuid(65534) == 0);  // the stranger: nobody
        std::vector<int> received;
        const rcnResult_t res = exchangeFds(listener, rank, endpoints, fds[0], deadlineAfterMs(3000), &received, &why);
        RANK_CHECK(res != rcnSuccess, "rank %d: the exchange across users succeeded", rank);
        if (rank == 1) RANK_CHECK(why.find("belongs to another user") != std::string::npos, "rank 1: %s", why.c_str());
        return 0;
      },
      60));
}
