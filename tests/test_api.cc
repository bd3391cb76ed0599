// SPDX-License-Identifier: BSD-3-Clause
// Argument checking of the public API: bad input gets rcnInvalidArgument and a
// logged reason, never a crash. Needs no GPU and no peer.
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "rocenante/rocenante.h"

namespace {

std::string lastError() { return rcnGetLastError(nullptr); }

}  // namespace

TEST_CASE("version and error strings") {
  int version = 0;
  REQUIRE(rcnGetVersion(&version) == rcnSuccess);
  CHECK(version == ROCENANTE_VERSION_CODE);
  CHECK(rcnGetVersion(nullptr) == rcnInvalidArgument);
  for (int r = 0; r < rcnNumResults; ++r)
    CHECK(std::strlen(rcnGetErrorString(static_cast<rcnResult_t>(r))) > 0);
  CHECK(std::string(rcnGetErrorString(static_cast<rcnResult_t>(99))) == "unknown result code");
}

// A later failure that logged nothing must not show an earlier one's cause.
TEST_CASE("each call clears the last error first") {
  CHECK(rcnGetVersion(nullptr) == rcnInvalidArgument);
  CHECK(lastError().find("version is NULL") != std::string::npos);
  int version = 0;
  CHECK(rcnGetVersion(&version) == rcnSuccess);
  CHECK(lastError().empty());
  CHECK(rcnGetLaunchInfo(nullptr) == rcnInvalidArgument);
  CHECK(rcnCommUserRank(nullptr, nullptr) != rcnSuccess);
  CHECK(lastError().find("rcnGetLaunchInfo") == std::string::npos);
  CHECK(rcnGetUniqueId(nullptr) == rcnInvalidArgument);
  rcnUniqueId id;
  CHECK(rcnGetUniqueId(&id) == rcnSuccess);
  CHECK(lastError().empty());
}

TEST_CASE("init rejects bad ranks and null handles") {
  rcnUniqueId id;
  std::memset(&id, 0, sizeof id);
  rcnComm_t comm = reinterpret_cast<rcnComm_t>(0x1);
  CHECK(rcnCommInitRank(nullptr, 2, id, 0) == rcnInvalidArgument);
  CHECK(rcnCommInitRank(&comm, 0, id, 0) == rcnInvalidArgument);
  CHECK(comm == nullptr);
  CHECK(lastError().find("nranks=0") != std::string::npos);
  CHECK(rcnCommInitRank(&comm, 2, id, 2) == rcnInvalidArgument);
  CHECK(lastError().find("rank=2") != std::string::npos);
  CHECK(rcnCommInitRank(&comm, 2, id, -1) == rcnInvalidArgument);
  CHECK(rcnCommInitRank(&comm, 100000000, id, 0) == rcnInvalidArgument);  // would size tables by it
  CHECK(lastError().find("nranks=100000000 is not in 1..1048576") != std::string::npos);
  CHECK(rcnGetUniqueId(nullptr) == rcnInvalidArgument);
  rcnComm_t comms[2];
  int dup[2] = {0, 0};
  CHECK(rcnCommInitAll(comms, 2, dup) == rcnInvalidArgument);
  CHECK(lastError().find("listed twice") != std::string::npos);
  CHECK(rcnCommInitAll(comms, 0, nullptr) == rcnInvalidArgument);
  CHECK(rcnCommInitAll(comms, 5000, nullptr) == rcnInvalidArgument);  // a thread each
  CHECK(lastError().find("ndev=5000") != std::string::npos);
}

TEST_CASE("calls on null, foreign or destroyed communicators are refused") {
  float x = 0;
  CHECK(rcnAllReduce(&x, &x, 1, rcnFloat32, rcnSum, nullptr, nullptr) == rcnInvalidArgument);
  CHECK(lastError().find("NULL") != std::string::npos);

  rcnComm fake;  // a live-looking object; then destroyed by hand
  fake.magic = rcnComm::kDeadMagic;
  CHECK(rcnAllReduce(&x, &x, 1, rcnFloat32, rcnSum, &fake, nullptr) == rcnInvalidArgument);
  CHECK(lastError().find("already destroyed") != std::string::npos);

  fake.magic = 12345;
  int count = 0;
  CHECK(rcnCommCount(&fake, &count) == rcnInvalidArgument);
  CHECK(lastError().find("not a rocenante communicator") != std::string::npos);
  CHECK(rcnCommDestroy(nullptr) == rcnSuccess);
  fake.magic = rcnComm::kLiveMagic;
}

TEST_CASE("bad types, ops and buffers are named") {
  rcnComm comm;
  comm.rank = 0;
  comm.nranks = 1;
  float x = 0;
  CHECK(rcnAllReduce(&x, &x, 1, static_cast<rcnDataType_t>(12), rcnSum, &comm, nullptr) ==
        rcnInvalidArgument);
  CHECK(lastError().find("datatype 12") != std::string::npos);
  CHECK(rcnAllReduce(&x, &x, 1, rcnFloat32, static_cast<rcnRedOp_t>(7), &comm, nullptr) ==
        rcnInvalidArgument);
  CHECK(lastError().find("op 7") != std::string::npos);
  CHECK(rcnAllReduce(nullptr, &x, 4, rcnFloat32, rcnSum, &comm, nullptr) == rcnInvalidArgument);
  CHECK(lastError().find("sendbuff is NULL") != std::string::npos);
  CHECK(rcnAllReduce(&x, nullptr, 4, rcnFloat32, rcnSum, &comm, nullptr) == rcnInvalidArgument);
  CHECK(lastError().find("recvbuff is NULL") != std::string::npos);
  CHECK(rcnAllReduce(nullptr, nullptr, 0, rcnFloat32, rcnSum, &comm, nullptr) == rcnSuccess);
  CHECK(rcnAllReduce(&x, &x, SIZE_MAX / 2, rcnFloat64, rcnSum, &comm, nullptr) == rcnInvalidArgument);
  CHECK(lastError().find("overflows") != std::string::npos);
  float many[8] = {};
  CHECK(rcnAllReduce(many, many + 1, 4, rcnFloat32, rcnSum, &comm, nullptr) == rcnInvalidArgument);
  CHECK(lastError().find("overlap partly") != std::string::npos);
  // Adjacent buffers pass the checks. This comm of one rank (on the host) has
  // no path and no NCCL, so the call is a copy: one rank's sum is its input.
  for (int i = 0; i < 4; ++i) many[i] = float(i + 1);
  CHECK(rcnAllReduce(many, many + 4, 4, rcnFloat32, rcnSum, &comm, nullptr) == rcnSuccess);
  for (int i = 0; i < 4; ++i) CHECK(many[4 + i] == float(i + 1));
  rcnCommInfo info;
  CHECK(rcnCommQuery(&comm, nullptr) == rcnInvalidArgument);
  CHECK(rcnCommQuery(&comm, &info) == rcnSuccess);
}

// Out-of-range or misspelt values must fail creation by name, not wrap when narrowed
// (-1 ms cast to uint64_t passed "positive"; 2^32+1 blocks cast to int is 1).
TEST_CASE("out-of-range or misspelt parameters fail init instead of wrapping or being ignored") {
  setenv("ROCENANTE_BACKEND", "host", 1);
  const struct { const char* name; const char* value; } cases[] = {
      {"ROCENANTE_TIMEOUT_MS", "-1"},
      {"ROCENANTE_TIMEOUT_MS", "20000000000000"},  // 2e13 ms: its nanoseconds overflow 64 bits
      {"ROCENANTE_MAX_BLOCKS", "4294967297"},
      {"ROCENANTE_THREADS", "4294967328"},
      {"ROCENANTE_BACKEND", "hots"},  // a typo: was taken as "auto" without a GPU
      // Settings of paths this communicator does not build are checked too.
      {"ROCENANTE_PROXY_THREADS", "0"},
      {"ROCENANTE_PROXY_SPIN_US", "-5"},
      {"ROCENANTE_DEVICE_WINDOW_BYTES", "1G"},
      {"ROCENANTE_P2P_IPC", "legcy"},
      {"ROCENANTE_WIRE", "shmm"},
  };
  for (const auto& c : cases) {
    INFO(c.name << "=" << c.value);
    setenv(c.name, c.value, 1);
    rcnUniqueId id;
    REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
    rcnComm_t comm = reinterpret_cast<rcnComm_t>(0x1);
    CHECK(rcnCommInitRank(&comm, 1, id, 0) == rcnInvalidArgument);
    CHECK(comm == nullptr);
    CHECK(lastError().find(c.name) != std::string::npos);
    unsetenv(c.name);
    setenv("ROCENANTE_BACKEND", "host", 1);
  }
  // rcnCommInitAll builds its ranks on threads of its own; the caller's
  // rcnGetLastError must still name the cause.
  setenv("ROCENANTE_TIMEOUT_MS", "-1", 1);
  rcnComm_t comms[2] = {reinterpret_cast<rcnComm_t>(0x1), reinterpret_cast<rcnComm_t>(0x1)};
  CHECK(rcnCommInitAll(comms, 2, nullptr) == rcnInvalidArgument);
  CHECK((comms[0] == nullptr && comms[1] == nullptr));
  CHECK(lastError().find("ROCENANTE_TIMEOUT_MS") != std::string::npos);
  unsetenv("ROCENANTE_TIMEOUT_MS");
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  rcnComm_t comm = nullptr;
  REQUIRE(rcnCommInitRank(&comm, 1, id, 0) == rcnSuccess);  // the same comm with defaults builds
  CHECK(rcnCommDestroy(comm) == rcnSuccess);
  unsetenv("ROCENANTE_BACKEND");
}

// rcnCommAbort is how a user unblocks a call stuck on a peer, so it comes
// from another thread while that call runs: it must not free the path under
// it. The race is narrow, so the case runs a few times.
TEST_CASE("rcnCommAbort from another thread unblocks a running all-reduce without a crash") {
  setenv("ROCENANTE_BACKEND", "host", 1);
  setenv("ROCENANTE_TIMEOUT_MS", "20000", 1);
  for (int round = 0; round < 5; ++round) {
    rcnComm_t comms[2] = {nullptr, nullptr};
    REQUIRE(rcnCommInitAll(comms, 2, nullptr) == rcnSuccess);
    std::vector<float> in(4096, 1.0f), out(4096, 0.0f);
    rcnResult_t callResult = rcnSuccess;
    std::string callError;
    auto start = std::chrono::steady_clock::now();
    // Rank 1 never joins, so rank 0's call waits until aborted.
    std::thread caller([&] {
      callResult = rcnAllReduce(in.data(), out.data(), in.size(), rcnFloat32, rcnSum, comms[0], nullptr);
      callError = rcnGetLastError(nullptr);  // this thread's: the comm is gone by now
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(rcnCommAbort(comms[0]) == rcnSuccess);
    caller.join();
    double waitedMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    CHECK(callResult == rcnRemoteError);  // rocenante.h: the codes have none for an abort
    CHECK(callError.find("aborted") != std::string::npos);
    CHECK(waitedMs < 5000);
    CHECK(rcnCommAbort(comms[1]) == rcnSuccess);
  }
  unsetenv("ROCENANTE_TIMEOUT_MS");
  unsetenv("ROCENANTE_BACKEND");
}
