// SPDX-License-Identifier: BSD-3-Clause
// A rank that leaves on purpose (its wire's close(), as destroying a
// communicator does) and then exits fails none of its peers over shm or tcp:
// they see it left, and the flag it raised before leaving stays readable. A
// rank that exits without that goodbye fails them, named, at once. (The end
// of a job: a rank that finished its last call exits while a peer still
// waits in that call for a third rank.)
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "test_host_util.h"
#include "transport/wire/exchange_layout.h"
#include "transport/wire/wire.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr uint64_t kTimeoutMs = 3000;
constexpr int kLeaver = 1;
constexpr uint32_t kFlagValue = 7;

using Clock = std::chrono::steady_clock;

std::unique_ptr<Wire> buildWire(Bootstrap* bs, const char* wireName) {
  setenv("ROCENANTE_WIRE", wireName, 1);
  const FastPathContext ctx = hostContext(bs, 4096, kTimeoutMs);
  const ExchangeLayout layout = ExchangeLayout::make(bs->nranks(), 4096, 1, 2048);
  WireKind kind;
  if (!parseWireKind(wireName, &kind)) return nullptr;
  std::unique_ptr<Wire> wire;
  std::string why;
  if (createWire(ctx, kind, layout.wireLayout(), &wire, &why) != rcnSuccess) return nullptr;
  return wire;
}

// Calls progress() for `ms`; the first failure's text, or "" when none came.
std::string failureWithin(Wire& wire, int ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    if (wire.progress() != rcnSuccess) {
      std::string why;
      wire.error(&why);
      return why.empty() ? "(no text)" : why;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return "";
}

// The two survivors leave together: after a failure a rank says no goodbye,
// so one survivor's exit would otherwise be the other's first failure. Each
// creates its file, then waits (bounded) for the other's.
void leaveWithOtherSurvivor(const std::string& dir, int rank) {
  std::fclose(std::fopen((dir + "/done" + std::to_string(rank)).c_str(), "w"));
  const std::string other = dir + "/done" + std::to_string(rank == 0 ? 2 : 0);
  const auto start = Clock::now();
  while (access(other.c_str(), F_OK) != 0 && Clock::now() - start < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// The leaver raises flag 0 on every peer, then leaves (with its goodbye when
// `goodbye`, else by _exit, as a crash would); the others look on.
void leaveAfterFlag(const char* wireName, bool goodbye) {
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  const int nranks = 3;
  char dirName[] = "/tmp/rcn_goodbyeXXXXXX";
  REQUIRE(mkdtemp(dirName) != nullptr);
  const std::string dir = dirName;
  checkRanks(runRanks(nranks, [&](int rank) {
    auto bs = joinBootstrap(id, rank, nranks);
    RANK_CHECK(bs != nullptr, "bootstrap\n");
    auto wire = buildWire(bs.get(), wireName);
    RANK_CHECK(wire != nullptr, "%s wire\n", wireName);
    RANK_CHECK(bs->barrier() == rcnSuccess, "barrier\n");
    if (rank == kLeaver) {
      for (int peer = 0; peer < nranks; ++peer)
        if (peer != rank) RANK_CHECK(wire->putFlag(peer, 0, kFlagValue) == rcnSuccess, "flag to %d\n", peer);
      if (!goodbye) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the flags are read (tcp) before the exit
        _exit(0);
      }
      wire->close();
      return 0;
    }
    const auto flag = [&] { return __atomic_load_n(&wire->flags()[0], __ATOMIC_ACQUIRE); };
    const auto start = Clock::now();
    while (flag() != kFlagValue && Clock::now() - start < std::chrono::milliseconds(kTimeoutMs))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    RANK_CHECK(flag() == kFlagValue, "rank %d never saw the leaver's flag\n", rank);
    if (goodbye) {
      // Long enough for the leaver to exit and the exit watch to look again.
      const std::string why = failureWithin(*wire, 1500);
      RANK_CHECK(why.empty(), "rank %d failed after a clean leave: %s\n", rank, why.c_str());
      RANK_CHECK(wire->peerLeft(kLeaver), "rank %d does not see rank %d left\n", rank, kLeaver);
      RANK_CHECK(flag() == kFlagValue, "the leaver's flag changed\n");
    } else {
      const std::string why = failureWithin(*wire, 1500);
      RANK_CHECK(!why.empty(), "rank %d did not notice the exit\n", rank);
      RANK_CHECK(why.find("rank 1") != std::string::npos, "rank %d blames someone else: %s\n", rank, why.c_str());
      RANK_CHECK(!wire->peerLeft(kLeaver), "a crash reads as a goodbye\n");
    }
    leaveWithOtherSurvivor(dir, rank);
    wire->close();  // as a destroy does
    return 0;
  }, 60), wireName);
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("wire goodbye: a rank that leaves on purpose and exits fails no peer", "[wire]") {
  for (const char* wireName : {"shm", "tcp"}) {
    INFO("wire " << wireName);
    leaveAfterFlag(wireName, true);
  }
}

TEST_CASE("wire goodbye: a rank that exits without it fails every peer, named", "[wire][fault]") {
  for (const char* wireName : {"shm", "tcp"}) {
    INFO("wire " << wireName);
    leaveAfterFlag(wireName, false);
  }
}
