// SPDX-License-Identifier: BSD-3-Clause
// Soak: a long randomized run of the public API on the host backend, across
// forked ranks. Every call draws its communicator (one over shm, one over
// tcp, and a third that is destroyed and made anew every kChurnCalls calls,
// alternating wires), element count (mostly decode-sized, now and then past
// the slot so it goes in chunks), type, op, and in place or not, from a plan
// every rank draws alike. Every result is checked against the float64
// reference of fresh random inputs, every rank's outputs are hashed and the
// hashes compared across ranks every kCompareEvery calls (over a bootstrap
// of their own, not the communicators under test). From the first tenth of
// the run on, the process's open descriptors must be the same at every
// incarnation of the third communicator over the same wire and at the end,
// and its resident memory must stay flat.
//
// RCN_SOAK_CALLS sets the number of calls (default 100000, what CI runs).
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/process_usage.h"
#include "support/rank_checks.h"
#include "support/scoped_env.h"
#include "test_host_util.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr long kChurnCalls = 10000;   // the third communicator lives this many calls
constexpr long kCompareEvery = 1000;  // ranks compare their output hashes this often
constexpr long kMaxRssGrowthBytes = 16l << 20;

long soakCalls() {
  const char* text = std::getenv("RCN_SOAK_CALLS");
  return text && std::atol(text) > 0 ? std::atol(text) : 100000;
}

// The ids the ranks start with, made in the parent before it forks them;
// each new incarnation of the third communicator gets one from rank 0.
struct SoakIds {
  rcnUniqueId check;      // the hashes' own bootstrap
  rcnUniqueId steady[2];  // shm, tcp
  rcnUniqueId churn;      // the third's first incarnation
};

rcnUniqueId newId() {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  return id;
}

rcnComm_t makeComm(const rcnUniqueId& id, int rank, const char* wire) {
  setenv("ROCENANTE_WIRE", wire, 1);
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, kRanks, id, rank) != rcnSuccess) {
    std::fprintf(stderr, "rank %d: rcnCommInitRank over %s: %s\n", rank, wire, rcnGetLastError(nullptr));
    return nullptr;
  }
  return comm;
}

// Mostly small (the checks' cost grows with the count, the protocol's
// hardly); a fifth up to 8K elements; one in a hundred up to 200K, past the
// slot, so it goes in chunks.
size_t drawCount(std::mt19937_64& plan) {
  const uint64_t kind = plan() % 100;
  if (kind < 80) return 1 + plan() % 512;
  if (kind < 99) return 1 + plan() % 8192;
  return 1 + plan() % 200000;
}

struct Call {
  int comm;
  size_t count;
  rcnDataType_t dtype;
  rcnRedOp_t op;
  bool inPlace;
};

Call drawCall(std::mt19937_64& plan) {
  Call c;
  c.comm = int(plan() % 3);
  c.count = drawCount(plan);
  c.dtype = rcnDataType_t(plan() % rcnNumTypes);
  c.op = rcnRedOp_t(plan() % rcnNumOps);
  c.inPlace = plan() % 2 == 0;
  return c;
}

// Open descriptors with each wire's incarnation of the third communicator
// (a tcp communicator holds other descriptors than an shm one), as first
// measured once warm; -1 until then.
struct DescriptorBaseline {
  int withWire[2] = {-1, -1};

  // The first measurement for `wire` is the baseline; a later one must equal it.
  bool flat(int wire, int now, int* before) {
    if (withWire[wire] < 0) withWire[wire] = now;
    *before = withWire[wire];
    return now == withWire[wire];
  }
};

int soakRank(const SoakIds& ids, int rank, long calls) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  auto check = joinBootstrap(ids.check, rank, kRanks);
  RANK_CHECK(check != nullptr, "rank %d: the hashes' bootstrap", rank);
  const char* wires[2] = {"shm", "tcp"};
  rcnComm_t comms[3] = {makeComm(ids.steady[0], rank, "shm"), makeComm(ids.steady[1], rank, "tcp"),
                        makeComm(ids.churn, rank, "shm")};
  RANK_CHECK(comms[0] && comms[1] && comms[2], "rank %d: communicators", rank);
  std::mt19937_64 plan(20261204);  // the same calls on every rank
  uint64_t rolling = 0;
  DescriptorBaseline descriptors;
  int churnWire = 0;
  long warmRss = 0;
  long failures = 0;
  for (long i = 0; i < calls; ++i) {
    if (i > 0 && i % kChurnCalls == 0) {
      RANK_CHECK(rcnCommDestroy(comms[2]) == rcnSuccess, "rank %d: destroy at call %ld", rank, i);
      std::vector<rcnUniqueId> next(kRanks);
      if (rank == 0) RANK_EXPECT(rcnGetUniqueId(&next[0]) == rcnSuccess);
      RANK_EXPECT(check->allGather(next.data(), sizeof(rcnUniqueId)) == rcnSuccess);
      churnWire = int((i / kChurnCalls) % 2);
      comms[2] = makeComm(next[0], rank, wires[churnWire]);
      RANK_CHECK(comms[2] != nullptr, "rank %d: churn at call %ld", rank, i);
    }
    if (i >= calls / 10) {
      int before = 0;
      const int now = i % kChurnCalls == 0 || i == calls / 10 ? openDescriptors() : -1;
      RANK_CHECK(now < 0 || descriptors.flat(churnWire, now, &before),
                 "rank %d: open descriptors with a %s communicator went from %d to %d by call %ld", rank,
                 wires[churnWire], before, now, i);
    }
    if (i == calls / 10) warmRss = residentBytes();
    const Call c = drawCall(plan);
    const uint64_t seed = uint64_t(i) + 1;
    std::vector<uint8_t> in = rankInput(seed, rank, kRanks, c.count, c.dtype, c.op);
    std::vector<uint8_t> out(in.size(), kPoisonByte);
    void* dst = c.inPlace ? in.data() : out.data();
    const rcnResult_t res = rcnAllReduce(in.data(), dst, c.count, c.dtype, c.op, comms[c.comm], nullptr);
    RANK_CHECK(res == rcnSuccess, "rank %d: call %ld (%s %s count %zu) failed: %s", rank, i, dtypeName(c.dtype),
               opName(c.op), c.count, rcnGetLastError(nullptr));
    const std::vector<uint8_t>& got = c.inPlace ? in : out;
    if (checkAgainstReference(got.data(), seed, kRanks, c.count, c.dtype, c.op, "soak")) {
      std::fprintf(stderr, "rank %d: call %ld wrong\n", rank, i);
      if (++failures > 10) return 2;
    }
    rolling = hashBytes(got.data(), got.size()) ^ (rolling * 1099511628211ull);
    if ((i + 1) % kCompareEvery == 0 || i + 1 == calls) {
      std::vector<uint64_t> hashes(kRanks);
      hashes[rank] = rolling;
      RANK_CHECK(check->allGather(hashes.data(), sizeof(uint64_t)) == rcnSuccess, "rank %d: hash exchange", rank);
      for (int r = 0; r < kRanks; ++r)
        RANK_CHECK(hashes[r] == hashes[0], "rank %d: outputs differ between ranks 0 and %d by call %ld", rank, r, i);
    }
  }
  int before = 0;
  const int endFds = openDescriptors();
  const bool fdsFlat = descriptors.flat(churnWire, endFds, &before);
  const long endRss = residentBytes();
  std::printf("rank %d: %ld calls; descriptors %d -> %d, resident %.1f -> %.1f MB\n", rank, calls, before, endFds,
              warmRss / 1e6, endRss / 1e6);
  RANK_CHECK(fdsFlat, "rank %d: open descriptors went from %d to %d", rank, before, endFds);
  RANK_CHECK(endRss - warmRss < kMaxRssGrowthBytes, "rank %d: resident memory grew by %.1f MB", rank,
             (endRss - warmRss) / 1e6);
  for (rcnComm_t comm : comms) RANK_CHECK(rcnCommDestroy(comm) == rcnSuccess, "rank %d: final destroy", rank);
  return failures == 0 ? 0 : 3;
}

}  // namespace

TEST_CASE("soak: randomized all-reduces on the host backend stay exact, identical and flat", "[host][soak]") {
  const long calls = soakCalls();
  SoakIds ids;
  ids.check = newId();
  ids.steady[0] = newId();
  ids.steady[1] = newId();
  ids.churn = newId();
  // Generous: 10^5 calls take 20 s on two idle cores, and several times
  // that on busy ones.
  const int limitSeconds = int(60 + calls / 100);
  checkRanks(runRanks(
      kRanks, [&](int rank) { return soakRank(ids, rank, calls); }, limitSeconds));
}
