// SPDX-License-Identifier: BSD-3-Clause
// The host backend through the public API, as on a machine without a GPU:
// rcnCommInitRank with ROCENANTE_BACKEND=host, rcnAllReduce on host pointers
// (any size: no NCCL behind it), rcnCommQuery, rcnCommGetDeviceComm (refused), rcnCommDestroy.
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/multiproc.h"
#include "support/scoped_env.h"
#include "support/rank_checks.h"
#include "support/temp_file.h"
#include "test_host_util.h"

using namespace rcn;
using namespace rcn::test;

namespace {

int runRank(const rcnUniqueId& id, int rank, int nranks, const char* wire, bool forced) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  setenv("ROCENANTE_WIRE", wire, 1);
  // Forced, the self-test's largest size is its own cap, not the host path's unbounded one.
  if (forced) setenv("ROCENANTE_FORCE", "rocenante", 1);
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, nranks, id, rank) != rcnSuccess) return 70;
  rcnCommInfo info{};
  if (rcnCommQuery(comm, &info) != rcnSuccess) return 71;
  if (info.path != rcnPathHost || info.cudaDev != -1 ||
      std::string(info.transport) != std::string("host-") + wire) {
    std::fprintf(stderr, "rank %d: path %d transport '%s' reason '%s'\n", rank, info.path,
                 info.transport, info.reason);
    return 72;
  }
  if (forced && info.selfTestPassed != 1) return 75;
  rcnDeviceComm dev{};  // the device API is the p2p path's only
  if (rcnCommGetDeviceComm(comm, &dev) != rcnInvalidUsage) return 74;
  // Refused quietly (INFO), yet rcnGetLastError says why, not an older error.
  if (std::string(rcnGetLastError(comm)).find("rcnCommGetDeviceComm") == std::string::npos) return 76;
  int failures = 0;
  uint64_t seed = 100;
  // Larger than ROCENANTE_MAX_BYTES (256 KB by default): chunked, no NCCL.
  for (size_t count : {size_t(3), size_t(12288), size_t(300000)}) {
    for (rcnDataType_t t : {rcnFloat32, rcnBfloat16, rcnFloat16, rcnInt64}) {
      ++seed;
      auto in = rankInput(seed, rank, nranks, count, t, rcnSum);
      std::vector<uint8_t> out(in.size(), kPoisonByte);
      if (rcnAllReduce(in.data(), out.data(), count, t, rcnSum, comm, nullptr) != rcnSuccess) return 73;
      failures += checkAgainstReference(out.data(), seed, nranks, count, t, rcnSum, wire) != 0;
    }
  }
  rcnResult_t async = rcnInProgress;
  if (rcnCommGetAsyncError(comm, &async) != rcnSuccess || async != rcnSuccess) ++failures;
  if (rcnCommDestroy(comm) != rcnSuccess) ++failures;
  return failures;
}

// Rank 0 has a call waiting for rank 1 (which never calls) on one thread
// while other threads tear the comm down: destroy waits for the call (it
// times out), and destroy and abort racing each other free it once.
int runTeardownRace(const rcnUniqueId& id, int rank, bool withAbort) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  setenv("ROCENANTE_TIMEOUT_MS", "1000", 1);
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, 2, id, rank) != rcnSuccess) return 70;
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    rcnCommDestroy(comm);  // its peer is gone by now: any result, no crash
    return 0;
  }
  std::vector<float> in(1000, 1.0f), out(1000);
  rcnResult_t callResult = rcnSuccess;
  std::thread caller([&] { callResult = rcnAllReduce(in.data(), out.data(), in.size(), rcnFloat32, rcnSum, comm, nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  rcnResult_t abortResult = rcnSuccess, destroyResult = rcnSuccess;
  std::thread aborter([&] {
    if (withAbort) abortResult = rcnCommAbort(comm);
  });
  destroyResult = rcnCommDestroy(comm);
  aborter.join();
  caller.join();
  if (callResult == rcnSuccess) return 71;  // its peer never called
  // An abort that starts after the destroy finished finds the comm destroyed.
  if (abortResult != rcnSuccess && abortResult != rcnInvalidArgument) return 72;
  // Alone, destroy frees the comm; beside an abort, whichever came second finds it gone.
  if (!withAbort && destroyResult != rcnSuccess) return 73;
  if (rcnCommDestroy(comm) == rcnSuccess) return 74;  // a dead comm is refused, not freed twice
  return 0;
}

// Rank 0 starts an all-reduce that waits for rank 1, then a second thread
// calls on the same communicator: refused at once (calls must not overlap),
// and the first call still completes with the right sum once rank 1 calls.
int runOverlappingCalls(const rcnUniqueId& id, int rank) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, 2, id, rank) != rcnSuccess) return 70;
  std::vector<float> in(1000, float(rank + 1)), out(1000, -1.0f);
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  } else {
    rcnResult_t firstResult = rcnInternalError;
    std::thread first([&] { firstResult = rcnAllReduce(in.data(), out.data(), in.size(), rcnFloat32, rcnSum, comm, nullptr); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::vector<float> other(1000, 5.0f), otherOut(1000);
    const rcnResult_t second = rcnAllReduce(other.data(), otherOut.data(), other.size(), rcnFloat32, rcnSum, comm, nullptr);
    const std::string why = rcnGetLastError(comm);
    first.join();
    if (second != rcnInvalidUsage || why.find("must not overlap") == std::string::npos) {
      std::fprintf(stderr, "the overlapping call: %s (%s)\n", rcnGetErrorString(second), why.c_str());
      return 71;
    }
    if (firstResult != rcnSuccess) return 72;
    for (float v : out)
      if (v != 3.0f) return 73;
    // Calls go on as before.
    std::fill(out.begin(), out.end(), -1.0f);
  }
  if (rank == 1 && rcnAllReduce(in.data(), out.data(), in.size(), rcnFloat32, rcnSum, comm, nullptr) != rcnSuccess)
    return 74;
  if (rank == 0 && rcnAllReduce(in.data(), out.data(), in.size(), rcnFloat32, rcnSum, comm, nullptr) != rcnSuccess)
    return 75;
  if (rank == 1 && rcnAllReduce(in.data(), out.data(), in.size(), rcnFloat32, rcnSum, comm, nullptr) != rcnSuccess)
    return 76;
  for (float v : out)
    if (v != 3.0f) return 77;
  return rcnCommDestroy(comm) == rcnSuccess ? 0 : 78;
}

#ifdef ROCENANTE_HAVE_YAML
// A policy file's `disable: true` or `force: nccl` leaves the host backend no
// path, as ROCENANTE_DISABLE=1 does: creation fails on every rank, naming the
// policy. Where the ranks' files differ, the startup vote says so instead.
int runDisabledByPolicy(const rcnUniqueId& id, int rank, const std::string& policy) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  setenv("ROCENANTE_POLICY", policy.c_str(), 1);
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, 2, id, rank) != rcnInvalidUsage) return 70;
  const std::string why = rcnGetLastError(nullptr);
  if (why.find("the policy sends every call to NCCL") == std::string::npos || why.find(policy) == std::string::npos) {
    std::fprintf(stderr, "rank %d: last error '%s'\n", rank, why.c_str());
    return 71;
  }
  return 0;
}

// Both ranks name the same file, ROCENANTE_POLICY=policy.yaml, but read it
// in their own working directory `dir`, where it differs (two nodes whose
// copies of one path disagree): the settings agree, the vote's comparison of
// the policies does not, and creation fails on both, naming the policy file.
int runPolicyContentDiffers(const rcnUniqueId& id, int rank, const std::string& dir) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  setenv("ROCENANTE_POLICY", "policy.yaml", 1);
  if (chdir(dir.c_str()) != 0) return 69;
  rcnComm_t comm = nullptr;
  const rcnResult_t result = rcnCommInitRank(&comm, 2, id, rank);
  const std::string why = rcnGetLastError(nullptr);
  if (result != rcnInvalidUsage || why.find("policy file") == std::string::npos) {
    std::fprintf(stderr, "rank %d: %s (%s)\n", rank, rcnGetErrorString(result), why.c_str());
    return 70;
  }
  return 0;
}

// Rank 0 reads `policy`, rank 1 none: creation fails on both with rcnInvalidUsage.
int runPolicyDiffers(const rcnUniqueId& id, int rank, const std::string& policy) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  if (!policy.empty()) setenv("ROCENANTE_POLICY", policy.c_str(), 1);
  rcnComm_t comm = nullptr;
  const rcnResult_t result = rcnCommInitRank(&comm, 2, id, rank);
  if (result != rcnInvalidUsage) {
    std::fprintf(stderr, "rank %d: %s (%s)\n", rank, rcnGetErrorString(result), rcnGetLastError(nullptr));
    return 70;
  }
  return 0;
}
#endif

// Rank 1 sets `name` to `value`, rank 0 not: creation fails on both, naming
// the difference (the wire's setup, or the fast path's absence, would
// otherwise split the ranks' collective steps and fail as a lost exchange).
int runSettingDiffers(const rcnUniqueId& id, int rank, const char* name, const char* value) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  if (rank == 1) setenv(name, value, 1);
  rcnComm_t comm = nullptr;
  const rcnResult_t result = rcnCommInitRank(&comm, 2, id, rank);
  const std::string why = rcnGetLastError(nullptr);
  if (result == rcnSuccess || why.find("configuration differs between rank 0 and rank 1") == std::string::npos) {
    std::fprintf(stderr, "rank %d: %s (%s)\n", rank, rcnGetErrorString(result), why.c_str());
    return 70;
  }
  return 0;
}

void runAll(int nranks, const char* wire, bool forced = false) {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(nranks, [&](int rank) { return runRank(id, rank, nranks, wire, forced); }, 90));
}

}  // namespace

TEST_CASE("public API on the host backend over shm", "[host][api]") { runAll(2, "shm"); }
TEST_CASE("public API on the host backend over tcp", "[host][api]") { runAll(3, "tcp"); }
TEST_CASE("public API on the host backend, forced", "[host][api]") { runAll(2, "shm", true); }

TEST_CASE("destroy and abort from other threads while a call waits", "[host][api]") {
  for (bool withAbort : {false, true}) {
    rcnUniqueId id;
    REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
    checkRanks(runRanks(2, [&](int rank) { return runTeardownRace(id, rank, withAbort); }, 60));
  }
}

TEST_CASE("a second thread's call on a communicator already in one is refused", "[host][api]") {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(2, [&](int rank) { return runOverlappingCalls(id, rank); }, 60));
}

TEST_CASE("ranks whose settings differ (wire, disable) are told so at creation", "[host][api]") {
  for (const auto& setting : {std::pair<const char*, const char*>{"ROCENANTE_WIRE", "tcp"},
                              {"ROCENANTE_DISABLE", "1"},
                              {"ROCENANTE_MAX_BYTES", "65536"}}) {
    const char* name = setting.first;  // not a structured binding: clang's C++17 cannot capture one
    const char* value = setting.second;
    INFO(name);
    rcnUniqueId id;
    REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
    checkRanks(runRanks(2, [&](int rank) { return runSettingDiffers(id, rank, name, value); }, 60));
  }
}

// A wire that cannot be built: the creation's error carries the wire's own
// reason, not a pointer back to rcnGetLastError.
TEST_CASE("a fast path that cannot be built says why in the creation's error", "[host][api]") {
  std::error_code ec;
  if (!std::filesystem::is_empty("/sys/class/infiniband", ec) && !ec) SKIP("this host has RDMA devices");
  rcn::test::ScopedEnv host("ROCENANTE_BACKEND", "host"), verbs("ROCENANTE_WIRE", "verbs");
  rcnComm_t comms[2] = {};
  CHECK(rcnCommInitAll(comms, 2, nullptr) != rcnSuccess);
  const std::string why = rcnGetLastError(nullptr);
  INFO(why);
  CHECK(why.find("building the fast path failed: verbs wire:") != std::string::npos);
}

#ifdef ROCENANTE_HAVE_YAML  // policy files need yaml-cpp
TEST_CASE("a policy that sends every call to NCCL leaves the host backend no path", "[host][api]") {
  for (const char* key : {"disable: true", "force: nccl"}) {
    INFO(key);
    const TempFile policy(std::string("version: 1\n") + key + "\n", "rcn_test_host_policy");
    rcnUniqueId id;
    REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
    checkRanks(runRanks(2, [&](int rank) { return runDisabledByPolicy(id, rank, policy.path()); }, 60));
  }
}

TEST_CASE("ranks whose policies differ on disable are told so", "[host][api]") {
  const TempFile off("version: 1\ndisable: true\n", "rcn_test_host_policy_off");
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  const auto start = std::chrono::steady_clock::now();
  checkRanks(runRanks(2, [&](int rank) { return runPolicyDiffers(id, rank, rank == 0 ? off.path() : ""); }, 60));
  // Both know at the vote, not at a bootstrap timeout.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("ranks whose policy files differ under the same path are told so at the vote", "[host][api]") {
  std::vector<std::filesystem::path> dirs;
  for (const char* content : {"version: 1\nclasses:\n  default:\n    one_shot_max_bytes: 4096\n", "version: 1\n"}) {
    char name[] = "/tmp/rcn_test_policy_dirXXXXXX";
    REQUIRE(mkdtemp(name) != nullptr);
    dirs.emplace_back(name);
    std::FILE* f = std::fopen((dirs.back() / "policy.yaml").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(content, f);
    std::fclose(f);
  }
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(2, [&](int rank) { return runPolicyContentDiffers(id, rank, dirs[rank].string()); }, 60));
  for (const auto& dir : dirs) std::filesystem::remove_all(dir);
}
#endif
