// SPDX-License-Identifier: BSD-3-Clause
// The p2p path through the public API with every GPU in this process
// (rcnCommInitAll): two communicators sets interleaved, every dtype x op,
// graphs, driven from one thread; and abort while other work keeps a GPU busy.
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "p2p_harness.h"
#include "rocenante/rocenante.h"
#include "support/gpu_case.h"
#include "support/stream_hold.h"
#include "support/timeout_scale.h"

using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kMaxBytes = 256 * 1024;

}  // namespace

TEST_CASE("rcnAllReduce over p2p with rcnCommInitAll: every dtype x op, two comms, graphs", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared noNccl(kRanks);  // on one GPU both ranks share it, which NCCL refuses
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  setenv("ROCENANTE_TRANSPORT", "p2p", 1);
  rcnComm_t a[kRanks] = {}, b[kRanks] = {};
  const int devices[kRanks] = {rankDevice(0), rankDevice(1)};
  REQUIRE(rcnCommInitAll(a, kRanks, devices) == rcnSuccess);
  REQUIRE(rcnCommInitAll(b, kRanks, devices) == rcnSuccess);
  for (rcnComm_t c : {a[0], a[1], b[0], b[1]}) {
    rcnCommInfo info;
    REQUIRE(rcnCommQuery(c, &info) == rcnSuccess);
    INFO(info.transport << ": " << info.reason);
    REQUIRE(info.path == rcnPathP2p);
    REQUIRE(std::strcmp(info.transport, "p2p-local") == 0);
  }
  std::vector<LocalRank> locals(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    locals[r].rank = r;
    locals[r].device = rankDevice(r);
    locals[r].comms = {commFn(a[r]), commFn(b[r])};
  }
  std::string why;
  {
    BatchRunner runner(kRanks, kMaxBytes, locals, [](const std::vector<uint64_t>& local, std::vector<uint64_t>* all) {
      *all = local;
      return true;
    });
    if (!runner.setUp(&why)) FAIL(why);
    std::vector<Call> calls = everyTypeAndOp(41, kMaxBytes, 2);
    if (!runInBatches(runner, calls, 700, false, &why)) FAIL(why);
    calls.resize(BatchRunner::kMaxCalls * 3);
    if (!runInBatches(runner, calls, 800, true, &why)) FAIL(why);
  }
  for (rcnComm_t c : {a[0], a[1], b[0], b[1]}) {
    rcnResult_t async = rcnInternalError;
    REQUIRE(rcnCommGetAsyncError(c, &async) == rcnSuccess);
    REQUIRE(async == rcnSuccess);
  }
  for (rcnComm_t c : {a[0], a[1], b[0], b[1]}) REQUIRE(rcnCommDestroy(c) == rcnSuccess);
}

// Work on the GPU that is not rocenante's and does not finish (here a host
// function on a stream of its own; in life an NCCL collective whose peer
// died) must not keep rcnCommAbort from returning: it gives up after
// ROCENANTE_TIMEOUT_MS and leaves the communicator's memory allocated.
TEST_CASE("rcnCommAbort returns while other work keeps the GPU busy", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared noNccl(kRanks);
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  setenv("ROCENANTE_TRANSPORT", "p2p", 1);
  rcnComm_t comms[kRanks] = {};
  const int devices[kRanks] = {rankDevice(0), rankDevice(1)};
  // The teardown bound is read at creation.
  auto shortWait = std::make_unique<ScopedEnv>("ROCENANTE_TIMEOUT_MS", scaledMsText(500).c_str());
  const rcnResult_t created = rcnCommInitAll(comms, kRanks, devices);
  shortWait.reset();
  REQUIRE(created == rcnSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t busy = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking) == cudaSuccess);
  // Should abort wait for the device after all, the busy work ends after
  // 10 s, so the case fails on its time instead of hanging.
  StreamHold hold(std::chrono::seconds(10));
  REQUIRE(hold.hold(busy) == cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  const rcnResult_t aborted = rcnCommAbort(comms[0]);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(hold.drain() == cudaSuccess);
  REQUIRE(cudaStreamDestroy(busy) == cudaSuccess);
  CHECK(aborted == rcnSuccess);
  CHECK(seconds >= scaledSeconds(0.45));  // it did wait for the device, up to the bound
  CHECK(seconds < scaledSeconds(5.0));    // and no longer
  // The held work is gone: rank 1's abort (on its own GPU, or on the shared
  // one) drains at once and frees everything.
  CHECK(rcnCommAbort(comms[1]) == rcnSuccess);
  unsetenv("ROCENANTE_FORCE");
  unsetenv("ROCENANTE_TRANSPORT");
}
