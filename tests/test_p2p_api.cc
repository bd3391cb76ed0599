// The p2p path through the public API, one process per GPU (rcnCommInitRank
// in forked ranks; the parent only makes the unique ids and never touches
// CUDA): every dtype x op over two interleaved communicators, graphs, and the
// timeout reported by rcnCommGetAsyncError, after which rcnCommAbort returns.
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/bootstrap.h"
#include "p2p_harness.h"
#include "rocenante/rocenante.h"
#include "support/gpu_case.h"
#include "support/multiproc.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kMaxBytes = 256 * 1024;

// Every eligible call goes to rocenante, whatever the self-test measured.
void forceFastPath(const char* timeoutMs) {
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  setenv("ROCENANTE_TRANSPORT", "p2p", 1);
  setenv("ROCENANTE_TIMEOUT_MS", timeoutMs, 1);
}

int correctnessRank(const rcnUniqueId ids[2], const rcnUniqueId& testId, int rank) {
  forceFastPath("10000");
  CHILD_CHECK(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
  std::unique_ptr<Bootstrap> exchange;  // the test's own channel, for output hashes
  CHILD_CHECK(bootstrapInitTcp(testId, rank, kRanks, &exchange) == rcnSuccess, "test bootstrap");
  rcnComm_t comms[2] = {nullptr, nullptr};
  for (int c = 0; c < 2; ++c) {
    CHILD_CHECK(rcnCommInitRank(&comms[c], kRanks, ids[c], rank) == rcnSuccess, "init: %s", rcnGetLastError(nullptr));
    rcnCommInfo info;
    CHILD_CHECK(rcnCommQuery(comms[c], &info) == rcnSuccess, "query");
    CHILD_CHECK(info.path == rcnPathP2p && std::strcmp(info.transport, "p2p-ipc") == 0,
                "comm %d took %s (%s)", c, info.transport, info.reason);
  }
  std::vector<LocalRank> locals(1);
  locals[0].rank = rank;
  locals[0].device = rank;
  locals[0].comms = {commFn(comms[0]), commFn(comms[1])};
  std::string why;
  {
    BatchRunner runner(kRanks, kMaxBytes, locals, exchangeViaBootstrap(exchange.get(), rank, kRanks));
    CHILD_CHECK(runner.setUp(&why), "%s", why.c_str());
    std::vector<Call> calls = everyTypeAndOp(31, kMaxBytes, 2);
    CHILD_CHECK(runInBatches(runner, calls, 500, false, &why), "eager: %s", why.c_str());
    calls.resize(BatchRunner::kMaxCalls * 3);
    CHILD_CHECK(runInBatches(runner, calls, 600, true, &why), "graph: %s", why.c_str());
  }
  for (rcnComm_t comm : comms) {
    rcnResult_t async = rcnInternalError;
    CHILD_CHECK(rcnCommGetAsyncError(comm, &async) == rcnSuccess && async == rcnSuccess, "async error");
  }
  CHILD_CHECK(exchange->barrier() == rcnSuccess, "barrier");
  for (rcnComm_t comm : comms) CHILD_CHECK(rcnCommDestroy(comm) == rcnSuccess, "destroy");
  return 0;
}

int timeoutRank(const rcnUniqueId& id, const rcnUniqueId& testId, int rank) {
  forceFastPath("500");
  CHILD_CHECK(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
  std::unique_ptr<Bootstrap> exchange;
  CHILD_CHECK(bootstrapInitTcp(testId, rank, kRanks, &exchange) == rcnSuccess, "test bootstrap");
  rcnComm_t comm = nullptr;
  CHILD_CHECK(rcnCommInitRank(&comm, kRanks, id, rank) == rcnSuccess, "init: %s", rcnGetLastError(nullptr));
  if (rank == 0) {
    void* buf = nullptr;
    CHILD_CHECK(cudaMalloc(&buf, 4096) == cudaSuccess, "cudaMalloc");
    CHILD_CHECK(cudaMemset(buf, 0, 4096) == cudaSuccess, "cudaMemset");
    const auto start = std::chrono::steady_clock::now();
    CHILD_CHECK(rcnAllReduce(buf, buf, 256, rcnFloat32, rcnSum, comm, nullptr) == rcnSuccess, "launch");
    // Poll as an application would; the error must show up within the timeout (plus slack).
    rcnResult_t async = rcnSuccess;
    double ms = 0;
    while (async == rcnSuccess && ms < 5000) {
      CHILD_CHECK(rcnCommGetAsyncError(comm, &async) == rcnSuccess, "rcnCommGetAsyncError");
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    CHILD_CHECK(async == rcnRemoteError, "async error %d after %.0f ms", static_cast<int>(async), ms);
    const std::string text = rcnGetLastError(comm);
    CHILD_CHECK(text.find("peer 1") != std::string::npos, "last error does not name peer 1: %s", text.c_str());
    std::fprintf(stderr, "rank 0 after %.0f ms: %s\n", ms, text.c_str());
    const auto abortStart = std::chrono::steady_clock::now();
    CHILD_CHECK(rcnCommAbort(comm) == rcnSuccess, "abort");
    const double abortMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - abortStart).count();
    CHILD_CHECK(abortMs < 5000, "rcnCommAbort took %.0f ms", abortMs);
    cudaFree(buf);
  }
  CHILD_CHECK(exchange->barrier() == rcnSuccess, "barrier");
  if (rank != 0) CHILD_CHECK(rcnCommAbort(comm) == rcnSuccess, "abort");
  return 0;
}

}  // namespace

TEST_CASE("rcnAllReduce over p2p, one process per GPU: every dtype x op, two comms, graphs", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  rcnUniqueId ids[2], testId;
  REQUIRE(rcnGetUniqueId(&ids[0]) == rcnSuccess);
  REQUIRE(rcnGetUniqueId(&ids[1]) == rcnSuccess);
  REQUIRE(bootstrapGetUniqueId(&testId) == rcnSuccess);
  auto outcomes = runRanks(kRanks, [&](int rank) { return correctnessRank(ids, testId, rank); }, 300);
  std::string report;
  if (!allSucceeded(outcomes, &report)) FAIL(report);
}

TEST_CASE("rcnCommGetAsyncError names a peer that skipped a call; rcnCommAbort returns", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  rcnUniqueId id, testId;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  REQUIRE(bootstrapGetUniqueId(&testId) == rcnSuccess);
  auto outcomes = runRanks(kRanks, [&](int rank) { return timeoutRank(id, testId, rank); }, 120);
  std::string report;
  if (!allSucceeded(outcomes, &report)) FAIL(report);
}
