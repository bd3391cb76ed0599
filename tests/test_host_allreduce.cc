// SPDX-License-Identifier: BSD-3-Clause
// The host backend across processes over the shm and tcp wires: every dtype
// and op against a float64 reference, counts from 1 element to several times
// the slot size (chunked), in-place calls, and bit-identical output on every
// rank.
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>

#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "test_host_util.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr size_t kSlotBytes = 4096;  // small, so modest counts already chunk

// One rank's whole run. Returns the number of failures (0 = pass).
int runRank(const rcnUniqueId& id, int rank, int nranks, const char* wire) {
  setenv("ROCENANTE_WIRE", wire, 1);
  auto bs = joinBootstrap(id, rank, nranks);
  if (!bs) return 100;
  std::unique_ptr<FastPath> path;
  std::string why;
  if (createHostPath(hostContext(bs.get(), kSlotBytes, 20000), &path, &why) != rcnSuccess || !path) {
    std::fprintf(stderr, "rank %d: no host path: %s\n", rank, why.c_str());
    return 101;
  }
  if (path->path() != rcnPathHost || std::string(path->transportName()) != std::string("host-") + wire)
    return 102;
  int failures = 0;
  std::mt19937_64 countRng(42);  // the same counts on every rank
  uint64_t seed = 1;
  for (int t = 0; t < rcnNumTypes; ++t) {
    for (int o = 0; o < rcnNumOps; ++o) {
      auto dtype = rcnDataType_t(t);
      auto op = rcnRedOp_t(o);
      const size_t counts[] = {1, 7 + countRng() % 300, kSlotBytes / dtypeSize(dtype),
                               1 + countRng() % (3 * kSlotBytes)};
      for (size_t count : counts) {
        ++seed;
        std::vector<uint8_t> in = rankInput(seed, rank, nranks, count, dtype, op);
        std::vector<uint8_t> out(in.size(), kPoisonByte);
        bool inPlace = (seed % 3) == 0;
        rcnResult_t res = inPlace ? path->allReduce(in.data(), in.data(), count, dtype, op, nullptr)
                                  : path->allReduce(in.data(), out.data(), count, dtype, op, nullptr);
        if (inPlace) out = in;
        if (res != rcnSuccess) {
          std::fprintf(stderr, "rank %d: allReduce failed (%d)\n", rank, res);
          return 103;
        }
        if (checkAgainstReference(out.data(), seed, nranks, count, dtype, op, wire)) ++failures;
        // Every rank must hold the same bytes.
        std::vector<uint64_t> hashes(nranks);
        hashes[rank] = hashBytes(out.data(), out.size());
        if (bs->allGather(hashes.data(), sizeof(uint64_t)) != rcnSuccess) return 104;
        for (int r = 0; r < nranks; ++r) failures += hashes[r] != hashes[0];
      }
    }
  }
  std::string asyncWhy;
  if (path->asyncError(&asyncWhy) != rcnSuccess) ++failures;
  return failures;
}

void runAll(int nranks, const char* wire) {
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(nranks, [&](int rank) { return runRank(id, rank, nranks, wire); }, 90));
}

}  // namespace

TEST_CASE("host backend over shm: every dtype and op, chunked counts", "[host][shm]") {
  runAll(3, "shm");
}

TEST_CASE("host backend over tcp: every dtype and op, chunked counts", "[host][tcp]") {
  runAll(3, "tcp");
}

TEST_CASE("host backend: shm with 2 ranks, tcp with 4 ranks", "[host]") {
  runAll(2, "shm");
  runAll(4, "tcp");
}
