// SPDX-License-Identifier: BSD-3-Clause
// The p2p path through the public API, one process per GPU (rcnCommInitRank
// in forked ranks; the parent only makes the unique ids and never touches
// CUDA): every dtype x op over two interleaved communicators, graphs, and the
// timeout reported by rcnCommGetAsyncError, after which rcnCommAbort returns;
// creation on a busy device, beside another thread's graph capture; and
// ranks that disagree on ROCENANTE_NATIVE_NCCL. Under ROCENANTE_TEST_SHARE_GPUS
// on one GPU both ranks share it, without NCCL (ROCENANTE_NATIVE_NCCL=0).
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "p2p_harness.h"
#include "rocenante/rocenante.h"
#include "support/gpu_case.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/reference.h"
#include "support/stream_hold.h"
#include "support/timeout_scale.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kMaxBytes = 256 * 1024;

// Every eligible call goes to rocenante, whatever the self-test measured;
// peers wait for each other timeoutMs (scaled, support/timeout_scale.h).
void forceFastPath(int64_t timeoutMs) {
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  setenv("ROCENANTE_TRANSPORT", "p2p", 1);
  setenv("ROCENANTE_TIMEOUT_MS", scaledMsText(timeoutMs).c_str(), 1);
}

int correctnessRank(const rcnUniqueId ids[2], const rcnUniqueId& testId, int rank) {
  forceFastPath(10000);
  CHILD_CHECK(cudaSetDevice(rankDevice(rank)) == cudaSuccess, "cudaSetDevice");
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
  locals[0].device = rankDevice(rank);
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
  forceFastPath(500);
  CHILD_CHECK(cudaSetDevice(rankDevice(rank)) == cudaSuccess, "cudaSetDevice");
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
    while (async == rcnSuccess && ms < scaledMs(5000)) {
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
    CHILD_CHECK(abortMs < scaledMs(5000), "rcnCommAbort took %.0f ms", abortMs);
    cudaFree(buf);
  }
  CHILD_CHECK(exchange->barrier() == rcnSuccess, "barrier");
  if (rank != 0) CHILD_CHECK(rcnCommAbort(comm) == rcnSuccess, "abort");
  return 0;
}

// A second communicator created while a blocking stream is held and another
// thread captures a graph in the global mode (a new process group while the
// model runs): creation must not wait for the held stream (a device-wide
// sync, a legacy-stream memset or a cudaFree would), must not break the
// capture, and an all-reduce must then run while the stream is still held.
// The first communicator is made on an idle device: the first creation in a
// process loads NCCL's kernels and ours (CUDA loads modules lazily), and
// loading a module waits for the device whoever does it.
int busyDeviceRank(const rcnUniqueId ids[2], int rank) {
  forceFastPath(10000);
  CHILD_CHECK(cudaSetDevice(rankDevice(rank)) == cudaSuccess, "cudaSetDevice");
  constexpr size_t kCount = 1024;
  cudaStream_t held = nullptr, captured = nullptr, work = nullptr;
  float* data = nullptr;
  void* scratch = nullptr;
  CHILD_CHECK(cudaStreamCreate(&held) == cudaSuccess, "cudaStreamCreate");  // blocking: the legacy stream waits for it
  CHILD_CHECK(cudaStreamCreateWithFlags(&captured, cudaStreamNonBlocking) == cudaSuccess, "capture stream");
  CHILD_CHECK(cudaStreamCreateWithFlags(&work, cudaStreamNonBlocking) == cudaSuccess, "work stream");
  CHILD_CHECK(cudaMalloc(reinterpret_cast<void**>(&data), kCount * sizeof(float)) == cudaSuccess, "cudaMalloc");
  CHILD_CHECK(cudaMalloc(&scratch, 4096) == cudaSuccess, "cudaMalloc");
  std::vector<float> host(kCount, float(rank + 1));
  CHILD_CHECK(copyToDevice(data, host.data(), kCount * sizeof(float)) == cudaSuccess, "upload");
  rcnComm_t first = nullptr;
  CHILD_CHECK(rcnCommInitRank(&first, kRanks, ids[0], rank) == rcnSuccess, "first init: %s", rcnGetLastError(nullptr));

  StreamHold hold(std::chrono::seconds(60));  // let go and drained on every return
  CHILD_CHECK(hold.hold(held) == cudaSuccess, "cudaLaunchHostFunc");
  std::promise<void> began, created;
  std::future<void> createdDone = created.get_future();
  cudaError_t captureEnd = cudaErrorUnknown, graphRun = cudaErrorUnknown;
  std::thread capturer([&] {
    cudaSetDevice(rankDevice(rank));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaError_t begun = cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal);
    if (begun == cudaSuccess) cudaMemsetAsync(scratch, 1, 4096, captured);
    began.set_value();
    createdDone.wait();
    if (begun != cudaSuccess) return void(captureEnd = begun);
    captureEnd = cudaStreamEndCapture(captured, &graph);
    if (captureEnd != cudaSuccess) return;
    graphRun = cudaGraphInstantiate(&exec, graph, 0);
    if (graphRun == cudaSuccess) graphRun = cudaGraphLaunch(exec, captured);
    if (graphRun == cudaSuccess) graphRun = cudaStreamSynchronize(captured);
    if (exec) cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
  began.get_future().wait();
  rcnComm_t comm = nullptr;
  const rcnResult_t init = rcnCommInitRank(&comm, kRanks, ids[1], rank);
  created.set_value();
  capturer.join();
  const bool stillHeld = cudaStreamQuery(held) == cudaErrorNotReady;
  CHILD_CHECK(init == rcnSuccess, "init while the device is busy: %s", rcnGetLastError(nullptr));
  CHILD_CHECK(stillHeld, "creation returned only after the held stream finished: it waited for the device");
  CHILD_CHECK(captureEnd == cudaSuccess, "the capture on another thread broke during creation: %s",
              cudaGetErrorString(captureEnd));
  CHILD_CHECK(graphRun == cudaSuccess, "the captured graph did not run: %s", cudaGetErrorString(graphRun));

  rcnCommInfo info{};
  CHILD_CHECK(rcnCommQuery(comm, &info) == rcnSuccess, "rcnCommQuery");
  CHILD_CHECK(info.path == rcnPathP2p, "not on p2p: %s", info.reason);
  CHILD_CHECK(rcnAllReduce(data, data, kCount, rcnFloat32, rcnSum, comm, work) == rcnSuccess, "launch");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  cudaError_t done = cudaErrorNotReady;
  while ((done = cudaStreamQuery(work)) == cudaErrorNotReady && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool heldDuringCall = cudaStreamQuery(held) == cudaErrorNotReady;
  hold.release();
  CHILD_CHECK(done == cudaSuccess, "the all-reduce did not finish beside the held stream: %s", cudaGetErrorString(done));
  CHILD_CHECK(heldDuringCall, "the held stream was released before the all-reduce finished");
  CHILD_CHECK(cudaMemcpy(host.data(), data, kCount * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "download");
  for (size_t i = 0; i < kCount; ++i) CHILD_CHECK(host[i] == 3.0f, "element %zu is %g, expected 3", i, host[i]);
  CHILD_CHECK(hold.drain() == cudaSuccess, "held stream");
  CHILD_CHECK(rcnCommDestroy(comm) == rcnSuccess, "destroy");
  CHILD_CHECK(rcnCommDestroy(first) == rcnSuccess, "destroy the first");
  cudaFree(data);
  cudaFree(scratch);
  return 0;
}

// Rank 1 asks for no NCCL communicator, rank 0 for one: both must fail
// creation naming the variable, before rank 0 enters ncclCommInitRank (which
// would wait for rank 1 without a bound).
int nativeNcclMismatchRank(const rcnUniqueId& id, int rank) {
  setenv("ROCENANTE_NATIVE_NCCL", rank == 1 ? "0" : "1", 1);
  CHILD_CHECK(cudaSetDevice(rankDevice(rank)) == cudaSuccess, "cudaSetDevice");
  rcnComm_t comm = nullptr;
  const rcnResult_t init = rcnCommInitRank(&comm, kRanks, id, rank);
  const std::string why = rcnGetLastError(nullptr);
  CHILD_CHECK(init == rcnInvalidArgument, "init returned %d: %s", static_cast<int>(init), why.c_str());
  CHILD_CHECK(comm == nullptr, "a failed init handed out a communicator");
  CHILD_CHECK(why.find("ROCENANTE_NATIVE_NCCL differs") != std::string::npos, "the error does not name it: %s",
              why.c_str());
  return 0;
}

// ROCENANTE_NATIVE_NCCL=0 on both ranks: rcnCommQuery reports the fast
// path's own limit, a call past it fails by name without launching (the
// peer makes the same call, so neither waits), one within it sums; and with
// ROCENANTE_DISABLE=1 there is no path at all, so creation fails on both
// ranks, naming both variables.
int noNcclRank(const rcnUniqueId ids[2], int rank) {
  setenv("ROCENANTE_NATIVE_NCCL", "0", 1);
  forceFastPath(10000);
  CHILD_CHECK(cudaSetDevice(rankDevice(rank)) == cudaSuccess, "cudaSetDevice");
  rcnComm_t comm = nullptr;
  CHILD_CHECK(rcnCommInitRank(&comm, kRanks, ids[0], rank) == rcnSuccess, "init: %s", rcnGetLastError(nullptr));
  rcnCommInfo info{};
  CHILD_CHECK(rcnCommQuery(comm, &info) == rcnSuccess, "query");
  CHILD_CHECK(info.path == rcnPathP2p, "not on p2p: %s", info.reason);
  CHILD_CHECK(info.maxBytes >= 1024 && info.maxBytes <= (size_t(1) << 30), "maxBytes %zu", info.maxBytes);
  const size_t past = info.maxBytes / sizeof(float) + 4, within = 256;
  float* data = nullptr;
  CHILD_CHECK(cudaMalloc(reinterpret_cast<void**>(&data), past * sizeof(float)) == cudaSuccess, "cudaMalloc");
  std::vector<float> host(within, float(rank + 1));
  CHILD_CHECK(copyToDevice(data, host.data(), within * sizeof(float)) == cudaSuccess, "upload");
  const rcnResult_t tooLarge = rcnAllReduce(data, data, past, rcnFloat32, rcnSum, comm, nullptr);
  const std::string why = rcnGetLastError(comm);
  CHILD_CHECK(tooLarge == rcnInvalidArgument, "a call past maxBytes returned %d: %s", static_cast<int>(tooLarge),
              why.c_str());
  CHILD_CHECK(why.find("ROCENANTE_NATIVE_NCCL=0") != std::string::npos, "the error does not say why: %s", why.c_str());
  CHILD_CHECK(rcnAllReduce(data, data, within, rcnFloat32, rcnSum, comm, nullptr) == rcnSuccess, "within: %s",
              rcnGetLastError(comm));
  CHILD_CHECK(cudaMemcpy(host.data(), data, within * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "download");
  for (size_t i = 0; i < within; ++i) CHILD_CHECK(host[i] == 3.0f, "element %zu is %g, expected 3", i, host[i]);
  CHILD_CHECK(rcnCommDestroy(comm) == rcnSuccess, "destroy");
  cudaFree(data);

  setenv("ROCENANTE_DISABLE", "1", 1);
  rcnComm_t off = nullptr;
  const rcnResult_t init = rcnCommInitRank(&off, kRanks, ids[1], rank);
  const std::string offWhy = rcnGetLastError(nullptr);
  CHILD_CHECK(init == rcnInvalidUsage && off == nullptr, "init with no path returned %d: %s", static_cast<int>(init),
              offWhy.c_str());
  CHILD_CHECK(offWhy.find("ROCENANTE_DISABLE") != std::string::npos &&
                  offWhy.find("ROCENANTE_NATIVE_NCCL=0") != std::string::npos,
              "the error does not name both: %s", offWhy.c_str());
  return 0;
}

}  // namespace

TEST_CASE("rcnAllReduce over p2p, one process per GPU: every dtype x op, two comms, graphs", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared ncclRule(kRanks);
  rcnUniqueId ids[2], testId;
  REQUIRE(rcnGetUniqueId(&ids[0]) == rcnSuccess);
  REQUIRE(rcnGetUniqueId(&ids[1]) == rcnSuccess);
  REQUIRE(bootstrapGetUniqueId(&testId) == rcnSuccess);
  checkRanks(runRanks(kRanks, [&](int rank) { return correctnessRank(ids, testId, rank); }, 300));
}

TEST_CASE("rcnCommGetAsyncError names a peer that skipped a call; rcnCommAbort returns", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared ncclRule(kRanks);
  rcnUniqueId id, testId;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  REQUIRE(bootstrapGetUniqueId(&testId) == rcnSuccess);
  checkRanks(runRanks(kRanks, [&](int rank) { return timeoutRank(id, testId, rank); }, 120));
}

TEST_CASE("A second creation waits for nothing else on the device and keeps another thread's graph capture", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared ncclRule(kRanks);
  rcnUniqueId ids[2];
  REQUIRE(rcnGetUniqueId(&ids[0]) == rcnSuccess);
  REQUIRE(rcnGetUniqueId(&ids[1]) == rcnSuccess);
  checkRanks(runRanks(kRanks, [&](int rank) { return busyDeviceRank(ids, rank); }, 120));
}

TEST_CASE("Ranks that disagree on ROCENANTE_NATIVE_NCCL all fail creation, naming it", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(kRanks, [&](int rank) { return nativeNcclMismatchRank(id, rank); }, 120));
}

TEST_CASE("Without NCCL (ROCENANTE_NATIVE_NCCL=0) a call past the fast path, and a policy with no path, fail by name",
          "[p2p][gpu][api]") {
  requireGpus(kRanks);
  rcnUniqueId ids[2];
  REQUIRE(rcnGetUniqueId(&ids[0]) == rcnSuccess);
  REQUIRE(rcnGetUniqueId(&ids[1]) == rcnSuccess);
  checkRanks(runRanks(kRanks, [&](int rank) { return noNcclRank(ids, rank); }, 120));
}
