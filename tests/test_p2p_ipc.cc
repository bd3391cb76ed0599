// SPDX-License-Identifier: BSD-3-Clause
// The p2p path with one process per GPU: regions shared through cuMem file
// descriptors (and the legacy cudaIpc handles), ranks forked from a parent
// that never touches CUDA, bootstrapped over TCP. Also the bounded wait: a
// rank that skips a call makes its peer's kernel report the missing peer.
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include <unistd.h>

#include "core/bootstrap.h"
#include "p2p_build.h"
#include "p2p_harness.h"
#include "support/gpu_case.h"
#include "support/multiproc.h"
#include "support/timeout_scale.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kMaxBytes = 256 * 1024;

// One rank: three paths (protocol split, all LL, all flags) over `ipc`.
int correctnessRank(const rcnUniqueId& id, int rank, const char* ipc, const char* expectName, bool everything) {
  std::unique_ptr<Bootstrap> bootstrap;
  CHILD_CHECK(bootstrapInitTcp(id, rank, kRanks, &bootstrap) == rcnSuccess, "bootstrap failed");
  std::vector<std::unique_ptr<FastPath>> paths(3);
  P2pOptions options;
  options.maxBytes = kMaxBytes;
  options.ipc = ipc;
  const char* ll[3] = {"65536", "262144", "0"};  // split at 64 KB, all LL, all separate flags
  std::string why;
  for (int i = 0; i < 3; ++i) {
    options.llMaxBytes = ll[i];
    CHILD_CHECK(buildP2pPath(bootstrap.get(), rank, kRanks, rankDevice(rank), options, &paths[i], &why), "%s", why.c_str());
  }
  CHILD_CHECK(std::string(paths[0]->transportName()) == expectName, "transport %s, expected %s",
              paths[0]->transportName(), expectName);
  std::vector<LocalRank> locals(1);
  locals[0].rank = rank;
  locals[0].device = rankDevice(rank);
  for (auto& p : paths) locals[0].comms.push_back(pathFn(p.get()));
  {
    BatchRunner runner(kRanks, kMaxBytes, locals, exchangeViaBootstrap(bootstrap.get(), rank, kRanks));
    CHILD_CHECK(runner.setUp(&why), "%s", why.c_str());
    std::vector<Call> calls = everyTypeAndOp(21, kMaxBytes, 3);
    if (!everything) calls.resize(BatchRunner::kMaxCalls * 2);
    CHILD_CHECK(runInBatches(runner, calls, 300, false, &why), "eager: %s", why.c_str());
    calls.resize(BatchRunner::kMaxCalls);
    CHILD_CHECK(runInBatches(runner, calls, 400, true, &why), "graph: %s", why.c_str());
  }
  for (auto& p : paths) CHILD_CHECK(p->asyncError(&why) == rcnSuccess, "async error: %s", why.c_str());
  CHILD_CHECK(bootstrap->barrier() == rcnSuccess, "final barrier");
  return 0;
}

void runCorrectness(const char* ipc, const char* expectName, bool everything) {
  requireGpus(kRanks);
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  auto outcomes = runRanks(kRanks, [&](int rank) { return correctnessRank(id, rank, ipc, expectName, everything); }, 240);
  std::string report;
  if (!allSucceeded(outcomes, &report)) FAIL(report);
}

// Rank 1 never calls; rank 0's call must end within the timeout and name peer 1.
int timeoutRank(const rcnUniqueId& id, int rank, const char* llMaxBytes) {
  std::unique_ptr<Bootstrap> bootstrap;
  CHILD_CHECK(bootstrapInitTcp(id, rank, kRanks, &bootstrap) == rcnSuccess, "bootstrap failed");
  P2pOptions options;
  options.maxBytes = kMaxBytes;
  options.timeoutMs = 500;
  options.llMaxBytes = llMaxBytes;
  std::unique_ptr<FastPath> path;
  std::string why;
  CHILD_CHECK(buildP2pPath(bootstrap.get(), rank, kRanks, rankDevice(rank), options, &path, &why), "%s", why.c_str());
  if (rank == 0) {
    void* buf = nullptr;
    CHILD_CHECK(cudaMalloc(&buf, 4096) == cudaSuccess, "cudaMalloc");
    CHILD_CHECK(cudaMemset(buf, 0, 4096) == cudaSuccess, "cudaMemset");
    auto start = std::chrono::steady_clock::now();
    CHILD_CHECK(path->allReduce(buf, buf, 1024, rcnFloat32, rcnSum, nullptr) == rcnSuccess, "launch");
    CHILD_CHECK(cudaDeviceSynchronize() == cudaSuccess, "the kernel must return, not trap");
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    CHILD_CHECK(ms >= scaledMs(400) && ms < scaledMs(5000), "the wait took %.0f ms, expected about %lld", ms,
                static_cast<long long>(scaledMs(500)));
    CHILD_CHECK(path->asyncError(&why) == rcnRemoteError, "no async error after the timeout");
    CHILD_CHECK(why.find("peer 1") != std::string::npos && why.find(scaledMsText(500) + " ms") != std::string::npos,
                "message does not name the peer: %s", why.c_str());
    std::fprintf(stderr, "rank 0 saw: %s (after %.0f ms)\n", why.c_str(), ms);
    // Later calls return the error at once instead of launching and waiting again.
    start = std::chrono::steady_clock::now();
    CHILD_CHECK(path->allReduce(buf, buf, 1024, rcnFloat32, rcnSum, nullptr) == rcnRemoteError,
                "a call after the failure was not refused with it");
    CHILD_CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    CHILD_CHECK(ms < scaledMs(200), "a call after the failure took %.0f ms", ms);
    path->abort();
    cudaFree(buf);
  }
  CHILD_CHECK(bootstrap->barrier() == rcnSuccess, "final barrier");
  path.reset();
  return 0;
}

// Rank 1 never calls; rank 0's abort() must end the wait long before the 10 s timeout.
int abortRank(const rcnUniqueId& id, int rank) {
  std::unique_ptr<Bootstrap> bootstrap;
  CHILD_CHECK(bootstrapInitTcp(id, rank, kRanks, &bootstrap) == rcnSuccess, "bootstrap failed");
  P2pOptions options;
  options.maxBytes = kMaxBytes;
  options.timeoutMs = 10000;
  std::unique_ptr<FastPath> path;
  std::string why;
  CHILD_CHECK(buildP2pPath(bootstrap.get(), rank, kRanks, rankDevice(rank), options, &path, &why), "%s", why.c_str());
  if (rank == 0) {
    void* buf = nullptr;
    CHILD_CHECK(cudaMalloc(&buf, 1 << 20) == cudaSuccess, "cudaMalloc");
    CHILD_CHECK(cudaMemset(buf, 0, 1 << 20) == cudaSuccess, "cudaMemset");
    const auto start = std::chrono::steady_clock::now();
    // Many waiting threads: 256 KB is 32768 LL units.
    CHILD_CHECK(path->allReduce(buf, buf, 65536, rcnFloat32, rcnSum, nullptr) == rcnSuccess, "launch");
    usleep(200 * 1000);
    path->abort();
    CHILD_CHECK(cudaDeviceSynchronize() == cudaSuccess, "the kernel must return, not trap");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    CHILD_CHECK(ms < scaledMs(3000), "abort took %.0f ms to end the wait", ms);
    CHILD_CHECK(path->asyncError(&why) == rcnRemoteError, "no async error after abort");
    CHILD_CHECK(why.find("aborted") != std::string::npos, "message: %s", why.c_str());
    std::fprintf(stderr, "rank 0 saw: %s (after %.0f ms)\n", why.c_str(), ms);
    cudaFree(buf);
  }
  CHILD_CHECK(bootstrap->barrier() == rcnSuccess, "final barrier");
  path.reset();
  return 0;
}

}  // namespace

TEST_CASE("p2p abort: a pending wait ends promptly and says so", "[p2p][gpu]") {
  requireGpus(kRanks);
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  auto outcomes = runRanks(kRanks, [&](int rank) { return abortRank(id, rank); }, 60);
  std::string report;
  if (!allSucceeded(outcomes, &report)) FAIL(report);
}

TEST_CASE("p2p, one process per GPU over cuMem IPC: every dtype x op, graphs", "[p2p][gpu]") {
  runCorrectness(nullptr, "p2p-ipc", true);
}

TEST_CASE("p2p, one process per GPU over legacy cudaIpc handles", "[p2p][gpu]") {
  runCorrectness("legacy", "p2p-ipc-legacy", false);
}

TEST_CASE("p2p timeout: a rank that skips a call is named, within the timeout", "[p2p][gpu]") {
  requireGpus(kRanks);
  for (const char* ll : {"262144", "0"}) {  // LL protocol, then separate flags
    rcnUniqueId id;
    REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
    auto outcomes = runRanks(kRanks, [&](int rank) { return timeoutRank(id, rank, ll); }, 60);
    std::string report;
    if (!allSucceeded(outcomes, &report)) FAIL(std::string("LL_MAX_BYTES=") + ll + ": " + report);
  }
}
