// SPDX-License-Identifier: BSD-3-Clause
// The launcher-style bootstrap (MASTER_ADDR:MASTER_PORT, src/core/bootstrap_env.cc)
// and the topology exchange across forked processes, as rocenante-probe runs it.
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <string>

#include "core/bootstrap_env.h"
#include "core/log.h"
#include "support/free_port.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "test_topology_support.h"

using namespace rcn;

TEST_CASE("ranks gather over MASTER_ADDR:PORT and agree on the class") {
  topotest::ScopedEnv file("ROCENANTE_TOPO_FILE", topotest::fixture("spark-3node-ring.yaml").c_str());
  int port = test::freePort();
  REQUIRE(port > 0);
  auto outcomes = test::runRanks(3, [port](int rank) {
    std::unique_ptr<Bootstrap> boot;
    if (bootstrapInitFromEnv(rank, 3, "127.0.0.1", port, &boot) != rcnSuccess) return 10;
    CommTopo topo;
    if (topoBuild(*boot, -1, &topo) != rcnSuccess) return 11;
    if (topo.cls != TopoClass::MultiNodeAnyToAny || topo.nnodes != 3) return 12;
    if (topo.ranks[2].host != "spark-3") return 13;
    return boot->barrier() == rcnSuccess ? 0 : 14;
  }, 60.0);
  test::checkRanks(outcomes);
}

TEST_CASE("a rank launched with another world size is refused with a reason") {
  topotest::ScopedEnv timeout("ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "3000");
  int port = test::freePort();
  REQUIRE(port > 0);
  auto outcomes = test::runRanks(2, [port](int rank) {
    std::unique_ptr<Bootstrap> boot;
    rcnResult_t r = bootstrapInitFromEnv(rank, rank == 0 ? 2 : 3, "127.0.0.1", port, &boot);
    return r == rcnSuccess ? 0 : 1;
  }, 30.0);
  REQUIRE(outcomes.size() == 2);
  CHECK(outcomes[1].exitCode == 1);  // told it disagrees with rank 0
  CHECK(outcomes[0].exitCode == 1);  // rank 0 never gets its second rank: bounded failure
  CHECK_FALSE(outcomes[0].timedOut);
}

TEST_CASE("bad launcher arguments are rejected before any socket") {
  std::unique_ptr<Bootstrap> boot;
  CHECK(bootstrapInitFromEnv(2, 2, "127.0.0.1", 29500, &boot) == rcnInvalidArgument);
  CHECK(bootstrapInitFromEnv(1, 2, "", 29500, &boot) == rcnInvalidArgument);
  CHECK(bootstrapInitFromEnv(1, 2, "127.0.0.1", 70000, &boot) == rcnInvalidArgument);
}

// Under a job scheduler rank 0's name may reach DNS after the workers start:
// a name that does not resolve is asked again until the bootstrap's bound.
TEST_CASE("a MASTER_ADDR that does not resolve is retried until the bootstrap timeout, then named") {
  topotest::ScopedEnv bound("ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "1500");
  std::unique_ptr<Bootstrap> boot;
  clearLastError();
  const auto start = std::chrono::steady_clock::now();
  CHECK(bootstrapInitFromEnv(1, 2, "rank0.invalid", 29500, &boot) == rcnInvalidArgument);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds >= 1.4);
  CHECK(seconds < 10);
  CHECK(std::string(lastErrorText()).find("cannot resolve MASTER_ADDR 'rank0.invalid'") != std::string::npos);
}
