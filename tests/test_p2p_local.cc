// SPDX-License-Identifier: BSD-3-Clause
// The p2p path with every rank in this process (the rcnCommInitAll case):
// raw pointers and peer access, one thread per rank to build, one thread to
// drive. Three paths at once: default protocol split, all LL, all flags.
// Then ranks whose calls differ, on the p2p path and on the proxy path
// (both ranks on one GPU).
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "p2p_build.h"
#include "p2p_harness.h"
#include "rocenante/rocenante.h"
#include "support/gpu_case.h"
#include "support/scoped_env.h"
#include "support/timeout_scale.h"
#include "transport/transport.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kMaxBytes = 256 * 1024;

using PathSet = std::vector<std::unique_ptr<FastPath>>;  // [rank]

struct ThreePaths {
  PathSet split, ll, flags;
};

// What a failed batch leaves in the paths: each error a kernel recorded, so
// that a wrong output is told apart from a wait that gave up.
std::string recordedErrors(std::initializer_list<const PathSet*> sets) {
  std::string text;
  for (const PathSet* set : sets)
    for (size_t r = 0; r < set->size(); ++r) {
      std::string err;
      if ((*set)[r]->asyncError(&err) != rcnSuccess) text += "\n  rank " + std::to_string(r) + " recorded: " + err;
    }
  return text;
}

void buildThree(ThreePaths* p) {
  std::string why;
  P2pOptions options;
  options.maxBytes = kMaxBytes;
  options.oneGpu = gpuCount() < kRanks;  // ROCENANTE_TEST_SHARE_GPUS: both ranks on GPU 0
  options.llMaxBytes = "65536";  // LL up to 64 KB, separate flags above
  if (!buildP2pPathsInProcess(kRanks, options, &p->split, &why)) FAIL(why);
  options.llMaxBytes = "262144";
  if (!buildP2pPathsInProcess(kRanks, options, &p->ll, &why)) FAIL(why);
  options.llMaxBytes = "0";
  if (!buildP2pPathsInProcess(kRanks, options, &p->flags, &why)) FAIL(why);
  REQUIRE(std::string(p->split[0]->transportName()) == "p2p-local");
}

std::vector<LocalRank> localRanks(ThreePaths& p) {
  std::vector<LocalRank> locals(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    locals[r].rank = r;
    locals[r].device = rankDevice(r);
    locals[r].comms = {pathFn(p.split[r].get()), pathFn(p.ll[r].get()), pathFn(p.flags[r].get())};
  }
  return locals;
}

BatchRunner::Exchange identity() {
  return [](const std::vector<uint64_t>& local, std::vector<uint64_t>* all) {
    *all = local;
    return true;
  };
}

}  // namespace

TEST_CASE("p2p in one process: every dtype x op, unaligned, in place, three protocols", "[p2p][gpu]") {
  requireGpus(kRanks);
  ThreePaths paths;
  buildThree(&paths);
  BatchRunner runner(kRanks, kMaxBytes, localRanks(paths), identity());
  std::string why;
  if (!runner.setUp(&why)) FAIL(why);
  const std::vector<Call> calls = everyTypeAndOp(11, kMaxBytes, 3);
  if (!runInBatches(runner, calls, 100, false, &why))
    FAIL(why << recordedErrors({&paths.split, &paths.ll, &paths.flags}));
  for (int r = 0; r < kRanks; ++r) {
    std::string err;
    REQUIRE(paths.split[r]->asyncError(&err) == rcnSuccess);
  }
}

TEST_CASE("p2p in one process: CUDA graph replay with changing inputs", "[p2p][gpu]") {
  requireGpus(kRanks);
  ThreePaths paths;
  buildThree(&paths);
  BatchRunner runner(kRanks, kMaxBytes, localRanks(paths), identity());
  std::string why;
  if (!runner.setUp(&why)) FAIL(why);
  // Sizes on both sides of the LL threshold in one graph: grids differ per call.
  std::vector<Call> calls;
  const size_t counts[] = {1, 3, 512, 4096, 8192, 32768, 65536, 100000};
  int i = 0;
  for (size_t count : counts) {
    Call c;
    c.dtype = rcnBfloat16;
    c.op = rcnSum;
    c.count = count;
    c.comm = i % 3;
    c.recvOffset = i % 2;
    c.inPlace = (i % 4) == 3;
    calls.push_back(c);
    ++i;
  }
  const std::initializer_list<const PathSet*> all = {&paths.split, &paths.ll, &paths.flags};
  if (!runner.run(calls, 5, true, 3, &why)) FAIL(why << recordedErrors(all));
  if (!runInBatches(runner, everyTypeAndOp(12, kMaxBytes, 3), 200, true, &why)) FAIL(why << recordedErrors(all));
}

namespace {

struct RankCall {
  size_t count;
  rcnDataType_t dtype;
  rcnRedOp_t op;
};

// Both ranks of fresh paths (on one GPU, two streams) make their own call
// (after a matched one) into a poisoned output, then rank 0's call again;
// returns each rank's asyncError, its text, what the call after returned,
// and whether the output was left as it was by both. options.create picks
// the transport (p2p when null).
void runPair(const RankCall (&calls)[2], P2pOptions options, rcnResult_t (&results)[2],
             std::string (&whys)[2], rcnResult_t (&after)[2], bool (&untouched)[2]) {
  options.oneGpu = true;
  options.timeoutMs = 20000;  // far longer than the test: a mismatch must not wait for it
  std::vector<std::unique_ptr<FastPath>> paths;
  std::string why;
  if (!buildP2pPathsInProcess(2, options, &paths, &why)) FAIL(why);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  constexpr size_t kBytes = 64 * 1024;
  constexpr int kPoison = 0x7f;
  void* buffers[2] = {};
  void* outputs[2] = {};
  cudaStream_t streams[2] = {};
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaMalloc(&buffers[r], kBytes) == cudaSuccess);
    REQUIRE(cudaMemset(buffers[r], 0, kBytes) == cudaSuccess);
    REQUIRE(cudaMalloc(&outputs[r], kBytes) == cudaSuccess);
    REQUIRE(cudaMemset(outputs[r], kPoison, kBytes) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) == cudaSuccess);
  }
  // A matched call first, so that the pair is not the path's first. Rank
  // 1's kernel is first launched in the pair: the path preloads its kernels,
  // or CUDA would load it lazily, waiting for rank 0's kernel, which waits
  // for it (ranks sharing a GPU) until the timeout.
  const RankCall sequence[2][2] = {{calls[0], calls[0]}, {calls[0], calls[1]}};
  for (int step = 0; step < 2; ++step) {
    for (int r = 0; r < 2; ++r) {
      const RankCall& c = sequence[step][r];
      void* out = step == 0 ? buffers[r] : outputs[r];
      REQUIRE(paths[r]->allReduce(buffers[r], out, c.count, c.dtype, c.op, streams[r]) == rcnSuccess);
    }
    for (int r = 0; r < 2; ++r) REQUIRE(cudaStreamSynchronize(streams[r]) == cudaSuccess);
  }
  for (int r = 0; r < 2; ++r) results[r] = paths[r]->asyncError(&whys[r]);
  for (int r = 0; r < 2; ++r)
    after[r] = paths[r]->allReduce(buffers[r], outputs[r], calls[0].count, calls[0].dtype, calls[0].op, streams[r]);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaStreamSynchronize(streams[r]) == cudaSuccess);
    std::vector<unsigned char> out(kBytes);
    REQUIRE(cudaMemcpy(out.data(), outputs[r], kBytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    untouched[r] = std::all_of(out.begin(), out.end(), [](unsigned char b) { return b == kPoison; });
    cudaStreamDestroy(streams[r]);
    cudaFree(buffers[r]);
    cudaFree(outputs[r]);
  }
}

struct MismatchCase {
  const char* what;
  RankCall calls[2];
};

const MismatchCase kMismatchCases[] = {
    {"same call", {{1000, rcnFloat32, rcnSum}, {1000, rcnFloat32, rcnSum}}},
    {"count", {{1000, rcnFloat32, rcnSum}, {1004, rcnFloat32, rcnSum}}},
    {"type of the same size", {{1000, rcnBfloat16, rcnSum}, {1000, rcnFloat16, rcnSum}}},
    {"op", {{1000, rcnFloat32, rcnSum}, {1000, rcnFloat32, rcnMax}}},
};

// Each case with the options' transport and LL limit: both ranks must report
// the other's different call (rcnInvalidUsage), refuse the next call with it
// and leave their output as it was, or all succeed.
void checkMismatchCases(const MismatchCase* cases, size_t n, const P2pOptions& options) {
  for (size_t i = 0; i < n; ++i) {
    const MismatchCase& c = cases[i];
    INFO(c.what << ", LL limit " << options.llMaxBytes);
    rcnResult_t results[2], after[2];
    std::string whys[2];
    bool untouched[2];
    runPair(c.calls, options, results, whys, after, untouched);
    const bool same = std::string(c.what) == "same call";
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << ": " << whys[r]);
      CHECK(results[r] == (same ? rcnSuccess : rcnInvalidUsage));
      CHECK(after[r] == results[r]);
      CHECK(untouched[r] == !same);
      if (!same) CHECK(whys[r].find("peer " + std::to_string(1 - r) + " made a different call") != std::string::npos);
    }
  }
}

// Two sizes on either side of the LL limit: one rank in each protocol.
const MismatchCase kAcrossLimit[] = {
    {"count across the LL limit", {{1000, rcnFloat32, rcnSum}, {16000, rcnFloat32, rcnSum}}},
    {"count across the LL limit, the larger first", {{16000, rcnFloat32, rcnSum}, {1000, rcnFloat32, rcnSum}}}};

}  // namespace

TEST_CASE("p2p: a rank that cannot use its GPU makes every rank go without the path, at once", "[p2p][gpu]") {
  requireGpus(1);
  P2pOptions options;
  options.oneGpu = true;
  options.unusableDeviceRank = 1;
  std::vector<std::unique_ptr<FastPath>> paths;
  std::string why;
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(buildP2pPathsInProcess(kRanks, options, &paths, &why));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(why);
  // Rank 0 hears rank 1's reason in the first exchange, well before the bootstrap's 30 s.
  CHECK(why.find("rank 0: no p2p path: rank 1 cannot use GPU " + std::to_string(kNoSuchDevice)) == 0);
  CHECK(seconds < scaledSeconds(10));
}

// The shim raises the kernels' bound once creation is done (comm.cc): a later
// call waits for a missing peer as long as the new bound, then names it.
TEST_CASE("p2p: setPeerWaitMs bounds the kernels' later waits for a peer", "[p2p][gpu]") {
  requireGpus(1);
  P2pOptions options;
  options.oneGpu = true;
  options.timeoutMs = 60000;  // creation's bound: the call below must not take it
  std::vector<std::unique_ptr<FastPath>> paths;
  std::string why;
  if (!buildP2pPathsInProcess(kRanks, options, &paths, &why)) FAIL(why);
  for (auto& path : paths) path->setPeerWaitMs(300);
  rcnDeviceComm device{};
  if (paths[0]->deviceComm(&device, &why)) CHECK(device.timeoutNs == 300000000ull);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  void* buffer = nullptr;
  REQUIRE(cudaMalloc(&buffer, 4096) == cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(paths[0]->allReduce(buffer, buffer, 1024, rcnFloat32, rcnSum, nullptr) == rcnSuccess);  // rank 1 never calls
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < scaledSeconds(5));
  CHECK(paths[0]->asyncError(&why) == rcnRemoteError);
  INFO(why);
  CHECK(why.find("peer 1 did not arrive within 300 ms") != std::string::npos);
  paths.clear();
  cudaFree(buffer);
}

TEST_CASE("p2p: ranks whose calls differ in count, type or op fail with rcnInvalidUsage", "[p2p][gpu]") {
  requireGpus(1);  // both ranks on GPU 0: the kernels are small enough to run side by side
  P2pOptions options;
  for (const char* llMaxBytes : {"262144", "0"}) {  // LL lines, then separate flags
    options.llMaxBytes = llMaxBytes;
    checkMismatchCases(kMismatchCases, std::size(kMismatchCases), options);
  }
  options.llMaxBytes = "16384";
  checkMismatchCases(kAcrossLimit, std::size(kAcrossLimit), options);
}

namespace {

// The ranks of one process on GPU 0, rank r calling through each set's path r.
std::vector<LocalRank> ranksOnGpu0(std::initializer_list<const PathSet*> sets) {
  std::vector<LocalRank> locals(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    locals[r].rank = r;
    locals[r].device = 0;
    for (const PathSet* set : sets) locals[r].comms.push_back(pathFn((*set)[r].get()));
  }
  return locals;
}

// After healthy calls no path may have recorded an error.
void checkNoAsyncError(const PathSet& paths) {
  const std::string errors = recordedErrors({&paths});
  INFO(errors);
  CHECK(errors.empty());
}

// Both ranks in this process on GPU 0, over two paths of `options`' kind:
// one that splits the protocols at splitLimit (so consecutive calls of one
// path change protocol: neither protocol's leftovers may read as the other's
// mark) and one with separate flags only. Every dtype x op, unaligned and in
// place, eagerly and in graphs, each checked against the reference.
void runOneGpuBatches(P2pOptions options, const char* splitLimit) {
  options.oneGpu = true;
  options.maxBytes = kMaxBytes;
  std::vector<std::unique_ptr<FastPath>> split, flags;
  std::string why;
  options.llMaxBytes = splitLimit;
  if (!buildP2pPathsInProcess(kRanks, options, &split, &why)) FAIL(why);
  options.llMaxBytes = "0";
  if (!buildP2pPathsInProcess(kRanks, options, &flags, &why)) FAIL(why);
  BatchRunner runner(kRanks, kMaxBytes, ranksOnGpu0({&split, &flags}), identity());
  if (!runner.setUp(&why)) FAIL(why);
  if (!runInBatches(runner, everyTypeAndOp(21, kMaxBytes, 2), 300, false, &why))
    FAIL(why << recordedErrors({&split, &flags}));
  if (!runInBatches(runner, everyTypeAndOp(22, kMaxBytes, 2), 400, true, &why))
    FAIL(why << recordedErrors({&split, &flags}));
  checkNoAsyncError(split);
  checkNoAsyncError(flags);
}

}  // namespace

// The p2p kernel's waits look for the other protocol's mark (one_shot.cu):
// healthy calls that alternate protocols must never see one.
TEST_CASE("p2p in one process on one GPU: protocols alternating call by call, eager and graph", "[p2p][gpu]") {
  requireGpus(1);
  runOneGpuBatches(P2pOptions{}, "65536");
}

// The proxy path's kernel and engine on a single GPU (its own tests need a
// GPU per process), over shm, LL up to 128 KB.
TEST_CASE("proxy in one process on one GPU: every dtype x op, unaligned, in place, eager and graph", "[proxy][gpu]") {
  requireGpus(1);
  ScopedEnv wire("ROCENANTE_WIRE", "shm");
  P2pOptions options;
  options.create = createProxyPath;
  runOneGpuBatches(options, "131072");
}

// The proxy path over shm, both ranks in this process on GPU 0, in its LL
// protocol (the signature half of the lines' tags), its flags protocol, and
// one rank in each (each wait looks where the other protocol leaves its mark).
TEST_CASE("proxy: ranks whose calls differ in count, type or op fail with rcnInvalidUsage", "[proxy][gpu]") {
  requireGpus(1);
  ScopedEnv wire("ROCENANTE_WIRE", "shm");
  P2pOptions options;
  options.create = createProxyPath;
  for (const char* llMaxBytes : {"131072", "0"}) {
    options.llMaxBytes = llMaxBytes;
    checkMismatchCases(kMismatchCases, std::size(kMismatchCases), options);
  }
  options.llMaxBytes = "16384";
  checkMismatchCases(kAcrossLimit, std::size(kAcrossLimit), options);
}

// The proxy path's LL tags keep 15 bits of the call (proxy_kernel.h), so a
// line left unwritten for 2^15 calls would read as current but for the
// scrub. A large LL call, then 32750 small ones (whose lines stay below the
// large one's), then the large call again exactly 2^15 call numbers later,
// with the call numbers crossing the 2^32 wrap (which skips 0 and 1, and two
// scrubs with them) in between: every result is checked.
TEST_CASE("proxy in one process on one GPU: LL lines 2^15 calls old, across the 2^32 wrap", "[proxy][gpu]") {
  requireGpus(1);
  ScopedEnv wire("ROCENANTE_WIRE", "shm");
  ScopedEnv first("ROCENANTE_PROXY_FIRST_CALL", std::to_string((1ull << 32) - 10000).c_str());
  P2pOptions options;
  options.create = createProxyPath;
  options.oneGpu = true;
  options.maxBytes = kMaxBytes;
  options.llMaxBytes = "131072";
  std::vector<std::unique_ptr<FastPath>> paths;
  std::string why;
  if (!buildP2pPathsInProcess(kRanks, options, &paths, &why)) FAIL(why);
  BatchRunner runner(kRanks, kMaxBytes, ranksOnGpu0({&paths}), identity());
  if (!runner.setUp(&why)) FAIL(why);
  Call large, small;
  large.count = 16384;  // 64 KB of floats: 8192 lines
  small.count = 64;
  std::vector<Call> first16(BatchRunner::kMaxCalls, small), middle(BatchRunner::kMaxCalls, small),
      last16(BatchRunner::kMaxCalls, small);
  first16[0] = large;
  // 16 + 2046 x 16 + 14 calls apart, plus the two numbers the wrap skips: 2^15.
  last16[14] = large;
  if (!runner.run(first16, 1, true, 1, &why)) FAIL(why);
  if (!runner.run(middle, 2, true, 2046, &why)) FAIL(why);
  if (!runner.run(last16, 3, true, 1, &why)) FAIL(why);
  checkNoAsyncError(paths);
}

// Destroy waits for the whole device before it frees (device_drain.h). A
// graph capture (global mode) under way on another thread makes CUDA refuse
// that wait, and invalidates the capture (measured on H200, CUDA 13.0): the
// destroy must then neither free what our kernels may still use nor wait out
// its bound, and the device must stay usable.
TEST_CASE("a destroy during another thread's capture returns at once, leaks instead of freeing", "[p2p][gpu]") {
  requireGpus(1);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const int devices[1] = {0};
  rcnComm_t comm = nullptr;
  REQUIRE(rcnCommInitAll(&comm, 1, devices) == rcnSuccess);
  void* buffer = nullptr;
  REQUIRE(cudaMalloc(&buffer, 4096) == cudaSuccess);
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(buffer, 0, 4096, stream) == cudaSuccess);
  rcnResult_t destroyed = rcnInternalError;
  const auto start = std::chrono::steady_clock::now();
  std::thread([&] {
    cudaSetDevice(0);
    destroyed = rcnCommDestroy(comm);
  }).join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(destroyed == rcnSuccess);
  CHECK(seconds < scaledSeconds(5));  // not ROCENANTE_TIMEOUT_MS
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  CHECK((ended == cudaSuccess || ended == cudaErrorStreamCaptureInvalidated));
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  // The device still works, for a new communicator too.
  CHECK(cudaMemsetAsync(buffer, 1, 4096, stream) == cudaSuccess);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  rcnComm_t again = nullptr;
  CHECK(rcnCommInitAll(&again, 1, devices) == rcnSuccess);
  if (again) CHECK(rcnCommDestroy(again) == rcnSuccess);
  cudaStreamDestroy(stream);
  cudaFree(buffer);
}
