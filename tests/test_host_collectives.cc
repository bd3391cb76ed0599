// SPDX-License-Identifier: BSD-3-Clause
// rcnAllGather and rcnReduceScatter on the host backend, through the public
// API over forked ranks: every type (and every op for reduce-scatter), sizes
// past one exchange slot (chunked), in place as NCCL defines it, each block
// of a reduce-scatter bit-identical to rcnAllReduce's, exact against the CPU
// reference; ranks that make different calls, and arguments that are wrong.
#include <catch2/catch_test_macros.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives_check.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr rcnDataType_t kAllTypes[] = {rcnInt8,    rcnUint8,   rcnInt32,   rcnUint32,   rcnInt64,      rcnUint64,
                                       rcnFloat16, rcnFloat32, rcnFloat64, rcnBfloat16, rcnFloat8e4m3, rcnFloat8e5m2};
constexpr rcnRedOp_t kAllOps[] = {rcnSum, rcnProd, rcnMax, rcnMin, rcnAvg};

rcnComm_t hostComm(const rcnUniqueId& id, int rank, int nranks, const char* wire) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  setenv("ROCENANTE_WIRE", wire, 1);
  rcnComm_t comm = nullptr;
  return rcnCommInitRank(&comm, nranks, id, rank) == rcnSuccess ? comm : nullptr;
}

// Out of place and in place (this rank's share already at its place in recv).
int allGatherCases(rcnComm_t comm, int rank, int nranks, const char* wire) {
  int failures = 0;
  uint64_t seed = 500;
  // 40000 x 8 bytes is past a 256 KB slot: chunked.
  for (size_t count : {size_t(1), size_t(3), size_t(1001), size_t(40000)})
    for (rcnDataType_t t : kAllTypes)
      for (bool inPlace : {false, true}) {
        ++seed;
        const std::vector<uint8_t> mine = rankInput(seed, rank, nranks, count, t, rcnSum);
        std::vector<uint8_t> recv(mine.size() * nranks, kPoisonByte);
        const void* send = mine.data();
        if (inPlace) {
          std::memcpy(recv.data() + size_t(rank) * mine.size(), mine.data(), mine.size());
          send = recv.data() + size_t(rank) * mine.size();
        }
        RANK_CHECK(rcnAllGather(send, recv.data(), count, t, comm, nullptr) == rcnSuccess, "all-gather %s %zu: %s",
                   dtypeName(t), count, rcnGetLastError(comm));
        failures += checkAllGather(recv.data(), seed, nranks, count, t, wire);
      }
  return failures;
}

// Each block against the reference and against rcnAllReduce of the same
// buffers (bit for bit), out of place and in place.
int reduceScatterCases(rcnComm_t comm, int rank, int nranks, const char* wire) {
  int failures = 0;
  uint64_t seed = 900;
  for (size_t count : {size_t(1), size_t(7), size_t(3000), size_t(20000)})
    for (rcnDataType_t t : kAllTypes)
      for (rcnRedOp_t op : kAllOps) {
        if (count == 20000 && op != rcnSum) continue;  // the chunking is the op's own: one op covers it
        ++seed;
        std::vector<uint8_t> send = reduceScatterInput(seed, rank, nranks, count, t, op);
        const size_t share = count * dtypeSize(t);
        std::vector<uint8_t> recv(share, kPoisonByte), reduced(send.size(), kPoisonByte);
        RANK_CHECK(rcnReduceScatter(send.data(), recv.data(), count, t, op, comm, nullptr) == rcnSuccess,
                   "reduce-scatter %s %s %zu: %s", dtypeName(t), opName(op), count, rcnGetLastError(comm));
        failures += checkReduceScatter(recv.data(), seed, nranks, rank, count, t, op, wire);
        RANK_CHECK(
            rcnAllReduce(send.data(), reduced.data(), send.size() / dtypeSize(t), t, op, comm, nullptr) == rcnSuccess,
            "all-reduce: %s", rcnGetLastError(comm));
        RANK_CHECK(std::memcmp(recv.data(), reduced.data() + size_t(rank) * share, share) == 0,
                   "reduce-scatter %s %s %zu differs from the all-reduce's block", dtypeName(t), opName(op), count);
        // In place: recvbuff is this rank's block of sendbuff.
        RANK_CHECK(rcnReduceScatter(send.data(), send.data() + size_t(rank) * share, count, t, op, comm, nullptr) ==
                       rcnSuccess,
                   "in-place reduce-scatter: %s", rcnGetLastError(comm));
        RANK_CHECK(std::memcmp(send.data() + size_t(rank) * share, recv.data(), share) == 0,
                   "in-place reduce-scatter %s %s %zu differs from out of place", dtypeName(t), opName(op), count);
      }
  return failures;
}

int runRank(const rcnUniqueId& id, int rank, int nranks, const char* wire) {
  rcnComm_t comm = hostComm(id, rank, nranks, wire);
  RANK_CHECK(comm != nullptr, "init: %s", rcnGetLastError(nullptr));
  int failures = allGatherCases(comm, rank, nranks, wire) + reduceScatterCases(comm, rank, nranks, wire);
  rcnResult_t async = rcnInProgress;
  RANK_EXPECT(rcnCommGetAsyncError(comm, &async) == rcnSuccess && async == rcnSuccess);
  RANK_EXPECT(rcnCommDestroy(comm) == rcnSuccess);
  return failures;
}

// Rank 0 all-gathers, rank 1 reduce-scatters the same count and type: both
// fail, naming both calls, and neither waits for a timeout.
int runDifferentCalls(const rcnUniqueId& id, int rank) {
  rcnComm_t comm = hostComm(id, rank, 2, "shm");
  RANK_CHECK(comm != nullptr, "init: %s", rcnGetLastError(nullptr));
  std::vector<float> send(64, 1.0f), recv(64);
  const rcnResult_t result = rank == 0
                                 ? rcnAllGather(send.data(), recv.data(), 32, rcnFloat32, comm, nullptr)
                                 : rcnReduceScatter(send.data(), recv.data(), 32, rcnFloat32, rcnSum, comm, nullptr);
  const std::string why = rcnGetLastError(comm);
  RANK_CHECK(result == rcnInvalidUsage, "rank %d: %s (%s)", rank, rcnGetErrorString(result), why.c_str());
  RANK_CHECK(why.find("all-gather of 32 x float") != std::string::npos &&
                 why.find("reduce-scatter of 32 x float sum") != std::string::npos &&
                 why.find("every rank must make the same call") != std::string::npos,
             "rank %d: %s", rank, why.c_str());
  rcnCommAbort(comm);
  return 0;
}

// Wrong arguments fail at once with rcnInvalidArgument naming the problem,
// before any exchange (so one rank alone makes them).
int runBadArguments(const rcnUniqueId& id, int rank) {
  rcnComm_t comm = hostComm(id, rank, 2, "shm");
  RANK_CHECK(comm != nullptr, "init: %s", rcnGetLastError(nullptr));
  if (rank == 0) {
    std::vector<float> buf(64);
    const auto refused = [&](rcnResult_t r, const char* text) {
      const std::string why = rcnGetLastError(comm);
      if (r == rcnInvalidArgument && why.find(text) != std::string::npos) return true;
      std::fprintf(stderr, "expected '%s', got %s (%s)\n", text, rcnGetErrorString(r), why.c_str());
      return false;
    };
    // Overlapping, but not in NCCL's in-place form.
    RANK_EXPECT(refused(rcnAllGather(buf.data() + 1, buf.data(), 16, rcnFloat32, comm, nullptr), "overlaps"));
    RANK_EXPECT(
        refused(rcnReduceScatter(buf.data(), buf.data() + 1, 16, rcnFloat32, rcnSum, comm, nullptr), "overlaps"));
    RANK_EXPECT(
        refused(rcnReduceScatter(buf.data(), buf.data() + 32, 16, rcnFloat32, rcnRedOp_t(9), comm, nullptr), "op 9"));
    RANK_EXPECT(
        refused(rcnAllGather(buf.data(), buf.data() + 32, 16, rcnDataType_t(40), comm, nullptr), "datatype 40"));
    RANK_EXPECT(refused(rcnAllGather(nullptr, buf.data(), 16, rcnFloat32, comm, nullptr), "sendbuff is NULL"));
    RANK_EXPECT(
        refused(rcnReduceScatter(buf.data(), nullptr, 16, rcnFloat32, rcnSum, comm, nullptr), "recvbuff is NULL"));
    RANK_EXPECT(
        refused(rcnAllGather(buf.data(), buf.data() + 32, SIZE_MAX / 4, rcnFloat32, comm, nullptr), "overflows"));
    // Nothing to do is success, as in NCCL.
    RANK_EXPECT(rcnAllGather(nullptr, nullptr, 0, rcnFloat32, comm, nullptr) == rcnSuccess);
  }
  RANK_EXPECT(rcnCommDestroy(comm) == rcnSuccess);
  return 0;
}

// Rank 1 reports its reduce-scatter self-test failed: with no NCCL behind
// the host backend, creation fails on every rank, naming the collective and
// the rank (on GPUs with NCCL that collective alone would go to NCCL).
int runSelfTestFailure(const rcnUniqueId& id, int rank) {
  setenv("ROCENANTE_SELFTEST_FAIL_RANK", "1", 1);
  setenv("ROCENANTE_SELFTEST_FAIL_COLLECTIVE", "reduce-scatter", 1);
  RANK_CHECK(hostComm(id, rank, 2, "shm") == nullptr, "rank %d: creation passed", rank);
  const std::string why = rcnGetLastError(nullptr);
  RANK_CHECK(why.find("reduce-scatter self-test failed on rank 1") != std::string::npos, "rank %d: %s", rank,
             why.c_str());
  return 0;
}

void runAll(int nranks, const char* wire) {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(
      nranks, [&](int rank) { return runRank(id, rank, nranks, wire); }, 120));
}

}  // namespace

TEST_CASE("all-gather and reduce-scatter on the host backend over shm", "[host][collectives]") { runAll(2, "shm"); }
TEST_CASE("all-gather and reduce-scatter on the host backend over tcp", "[host][collectives]") { runAll(3, "tcp"); }

TEST_CASE("ranks making different collectives fail, naming both", "[host][collectives]") {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(
      2, [&](int rank) { return runDifferentCalls(id, rank); }, 60));
}

TEST_CASE("a collective's failed self-test on one rank is every rank's verdict", "[host][collectives]") {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(
      2, [&](int rank) { return runSelfTestFailure(id, rank); }, 60));
}

TEST_CASE("wrong all-gather and reduce-scatter arguments are refused by name", "[host][collectives]") {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(
      2, [&](int rank) { return runBadArguments(id, rank); }, 60));
}
