// SPDX-License-Identifier: BSD-3-Clause
// The startup self-test and vote (src/core/selftest.cc) on the host backend,
// which needs no GPU: the correctness check runs, the vote gathers every
// rank's verdict, the config hash must agree. Without NCCL to fall back to, a
// failed vote fails communicator creation on every rank.
#include <catch2/catch_test_macros.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include <unistd.h>

#include "core/log.h"
#include "rocenante/rocenante.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/temp_file.h"

namespace {

constexpr int kRanks = 2;

// Exit codes of one rank: 0 as expected, else which expectation failed.
enum : int { kOk = 0, kInitFailed = 10, kInitSucceeded, kQueryFailed, kWrongInfo, kWrongMessage, kAllReduceFailed };

struct Expect {
  bool initOk;
  int selfTestPassed;
  const char* text;  // in the reason (success) or the last error (failure)
};

int runRank(const rcnUniqueId& id, int rank, const Expect& expect) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  setenv("ROCENANTE_WIRE", "shm", 1);
  rcnComm_t comm = nullptr;
  rcnResult_t res = rcnCommInitRank(&comm, kRanks, id, rank);
  if (!expect.initOk) {
    if (res == rcnSuccess) return kInitSucceeded;
    std::string last = rcn::lastErrorText();
    if (last.find(expect.text) == std::string::npos) {
      fprintf(stderr, "rank %d: last error '%s' lacks '%s'\n", rank, last.c_str(), expect.text);
      return kWrongMessage;
    }
    return kOk;
  }
  if (res != rcnSuccess) return kInitFailed;
  rcnCommInfo info;
  if (rcnCommQuery(comm, &info) != rcnSuccess) return kQueryFailed;
  fprintf(stderr, "rank %d: path %d %s selftest %d: %s\n", rank, info.path, info.transport,
          info.selfTestPassed, info.reason);
  if (info.path != rcnPathHost || info.selfTestPassed != expect.selfTestPassed) return kWrongInfo;
  if (!strstr(info.reason, expect.text)) return kWrongMessage;
  float in[5] = {1, 2, 3, 4, float(rank)}, out[5] = {};
  if (rcnAllReduce(in, out, 5, rcnFloat32, rcnSum, comm, nullptr) != rcnSuccess) return kAllReduceFailed;
  if (out[0] != 2 || out[4] != 1) return kAllReduceFailed;
  rcnCommDestroy(comm);
  return kOk;
}

// Runs kRanks processes; `setup` adjusts the environment of each rank first.
void runCase(const Expect& expect, const std::function<void(int rank)>& setup) {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  auto outcomes = rcn::test::runRanks(kRanks, [&](int rank) {
    if (setup) setup(rank);
    return runRank(id, rank, expect);
  }, 60);
  rcn::test::checkRanks(outcomes);
}

}  // namespace

TEST_CASE("the self-test passes on a healthy host backend") {
  runCase({true, 1, "self-test passed on every rank"}, [](int) {
    unsetenv("ROCENANTE_SELFTEST_FAIL_RANK");
    unsetenv("ROCENANTE_SELFTEST");
  });
}

TEST_CASE("a forced failure on one rank fails the vote on every rank") {
  // The host backend has no NCCL to fall back to, so creation fails everywhere.
  runCase({false, 0, "self-test failed on rank 1"}, [](int) { setenv("ROCENANTE_SELFTEST_FAIL_RANK", "1", 1); });
}

TEST_CASE("ROCENANTE_SELFTEST=0 skips the test but keeps the config check") {
  runCase({true, 0, "self-test skipped"}, [](int) {
    unsetenv("ROCENANTE_SELFTEST_FAIL_RANK");
    setenv("ROCENANTE_SELFTEST", "0", 1);
  });
}

TEST_CASE("a configuration that differs between ranks fails the vote with a clear message") {
  // Same content, different path: the agreed text names the file, so it differs.
  rcn::test::TempFile policies[2] = {rcn::test::TempFile("version: 1\n"), rcn::test::TempFile("version: 1\n")};
  runCase({false, 0, "configuration differs between rank 0 and rank 1"}, [&](int rank) {
    unsetenv("ROCENANTE_SELFTEST_FAIL_RANK");
    unsetenv("ROCENANTE_SELFTEST");
    setenv("ROCENANTE_POLICY", policies[rank].path().c_str(), 1);
  });
}
