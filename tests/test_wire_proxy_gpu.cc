// SPDX-License-Identifier: BSD-3-Clause
// The proxy path on GPUs (2 processes, one GPU each, shm wire by default):
// every dtype and op against a float64 reference with poisoned outputs,
// unaligned pointers, bit-identical results on every rank, CUDA graph
// replay, and the latency of bf16 sum at 48 KB in a CUDA graph. Over the
// shm and tcp wires (regions in pinned host memory) and the cuda wire
// (regions in GPU memory written by the copy engine: the GPUDirect RDMA
// protocol, staged LL, without a NIC).
// Each case skips without 2 GPUs.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>

#include "core/params.h"
#include "support/gpu.h"
#include "support/gpu_case.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/reference.h"
#include "support/scoped_env.h"
#include "test_host_util.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr size_t kMaxBytes = 256 * 1024;

#define CUDA_OK(call) RETURN_ON_CUDA_ERROR(call, 90)

struct Rank {
  int rank, nranks;
  std::unique_ptr<Bootstrap> bs;
  std::unique_ptr<FastPath> path;
  cudaStream_t stream = nullptr;
  uint8_t* dsend = nullptr;
  uint8_t* drecv = nullptr;
};

// One all-reduce with a fresh input, checked; returns failures.
int checkedCall(Rank& R, uint64_t seed, size_t count, rcnDataType_t t, rcnRedOp_t op, size_t misalign) {
  auto in = rankInput(seed, R.rank, R.nranks, count, t, op);
  std::vector<uint8_t> out(in.size());
  CUDA_OK(copyToDevice(R.dsend + misalign, in.data(), in.size()));
  if (!poisonDevice(R.drecv, kMaxBytes + 64)) return 90;
  if (R.path->allReduce(R.dsend + misalign, R.drecv + misalign, count, t, op, R.stream) != rcnSuccess) return 91;
  CUDA_OK(cudaStreamSynchronize(R.stream));
  CUDA_OK(cudaMemcpy(out.data(), R.drecv + misalign, out.size(), cudaMemcpyDeviceToHost));
  int failures = checkAgainstReference(out.data(), seed, R.nranks, count, t, op, "proxy") != 0;
  std::vector<uint64_t> hashes(R.nranks);
  hashes[R.rank] = hashBytes(out.data(), out.size());
  if (R.bs->allGather(hashes.data(), sizeof(uint64_t)) != rcnSuccess) return 92;
  for (int r = 0; r < R.nranks; ++r) failures += hashes[r] != hashes[0];
  return failures;
}

int allTypesAndOps(Rank& R) {
  int failures = 0;
  uint64_t seed = 1000;
  std::mt19937_64 countRng(7);  // the same counts on every rank
  for (int t = 0; t < rcnNumTypes; ++t) {
    for (int o = 0; o < rcnNumOps; ++o) {
      auto dtype = rcnDataType_t(t);
      const size_t size = dtypeSize(dtype);
      const size_t counts[] = {1, 1 + countRng() % 5000, kMaxBytes / size};
      for (size_t count : counts) {
        size_t misalign = (seed % 4 == 1 && count < kMaxBytes / size) ? size : 0;
        int f = checkedCall(R, ++seed, count, dtype, rcnRedOp_t(o), misalign);
        if (f >= 90) return f;
        failures += f;
      }
    }
  }
  return failures;
}

// Captures one call, replays it with new inputs each time.
int graphReplay(Rank& R) {
  const size_t count = 24576;  // 48 KB of bf16
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(R.stream, cudaStreamCaptureModeThreadLocal));
  rcnResult_t res = R.path->allReduce(R.dsend, R.drecv, count, rcnBfloat16, rcnSum, R.stream);
  CUDA_OK(cudaStreamEndCapture(R.stream, &graph));
  if (res != rcnSuccess) return 93;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  int failures = 0;
  for (int i = 0; i < 6; ++i) {
    uint64_t seed = 5000 + i;
    auto in = rankInput(seed, R.rank, R.nranks, count, rcnBfloat16, rcnSum);
    std::vector<uint8_t> out(in.size());
    CUDA_OK(copyToDevice(R.dsend, in.data(), in.size()));
    if (!poisonDevice(R.drecv, in.size())) return 90;
    CUDA_OK(cudaGraphLaunch(exec, R.stream));
    CUDA_OK(cudaStreamSynchronize(R.stream));
    CUDA_OK(cudaMemcpy(out.data(), R.drecv, out.size(), cudaMemcpyDeviceToHost));
    failures += checkAgainstReference(out.data(), seed, R.nranks, count, rcnBfloat16, rcnSum, "graph") != 0;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return failures;
}

// 20 calls per graph, as serving stacks capture them; microseconds per call,
// the median over 100 replays timed one by one: the proxy threads share the
// host's CPUs, and one descheduled thread stalls a whole replay, so a mean
// would report the host's noise.
int latency(Rank& R, size_t bytes, double* usPerCall) {
  const size_t count = bytes / 2;
  const int perGraph = 20, replays = 100;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(R.stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < perGraph; ++i)
    R.path->allReduce(R.dsend, R.drecv, count, rcnBfloat16, rcnSum, R.stream);
  CUDA_OK(cudaStreamEndCapture(R.stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 10; ++i) CUDA_OK(cudaGraphLaunch(exec, R.stream));
  CUDA_OK(cudaStreamSynchronize(R.stream));
  if (R.bs->barrier() != rcnSuccess) return 94;
  std::vector<cudaEvent_t> marks(replays + 1);
  for (auto& e : marks) CUDA_OK(cudaEventCreate(&e));
  CUDA_OK(cudaEventRecord(marks[0], R.stream));
  for (int i = 0; i < replays; ++i) {
    CUDA_OK(cudaGraphLaunch(exec, R.stream));
    CUDA_OK(cudaEventRecord(marks[i + 1], R.stream));
  }
  CUDA_OK(cudaEventSynchronize(marks[replays]));
  std::vector<float> usPerReplay(replays);
  for (int i = 0; i < replays; ++i) {
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, marks[i], marks[i + 1]));
    usPerReplay[i] = ms * 1000.0f / perGraph;
  }
  std::nth_element(usPerReplay.begin(), usPerReplay.begin() + replays / 2, usPerReplay.end());
  *usPerCall = usPerReplay[replays / 2];
  for (auto& e : marks) cudaEventDestroy(e);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 0;
}

int runRank(const rcnUniqueId& id, int rank, int nranks, const char* wire, bool measure) {
  Rank R{rank, nranks};
  CUDA_OK(cudaSetDevice(rankDevice(rank)));
  setenv("ROCENANTE_WIRE", wire, 1);
  R.bs = joinBootstrap(id, rank, nranks);
  if (!R.bs) return 80;
  FastPathContext ctx = hostContext(R.bs.get(), kMaxBytes, 10000);
  ctx.cudaDev = rankDevice(rank);
  ctx.maxBlocks = int(paramInt(ParamId::MaxBlocks));  // 32 and 512 unless the run sweeps them
  ctx.threads = int(paramInt(ParamId::Threads));
  std::string why;
  if (createProxyPath(ctx, &R.path, &why) != rcnSuccess || !R.path) {
    std::fprintf(stderr, "rank %d: no proxy path: %s\n", rank, why.c_str());
    return 81;
  }
  if (R.path->path() != rcnPathProxy) return 82;
  // Regions in GPU memory exactly where the wire writes GPU memory.
  const bool gpuMemory = std::string(R.path->transportName()).find("-gpumem") != std::string::npos;
  if (gpuMemory != (std::string(wire) == "cuda")) return 83;
  CUDA_OK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&R.dsend), kMaxBytes + 64));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&R.drecv), kMaxBytes + 64));
  int failures = allTypesAndOps(R);
  if (failures) std::fprintf(stderr, "rank %d: %d dtype/op failures\n", rank, failures);
  if (failures < 90) failures += graphReplay(R);
  for (size_t kb : {size_t(8), size_t(16), size_t(32), size_t(48), size_t(64), size_t(128), size_t(256)}) {
    if (failures || !measure) break;
    double us = 0;
    failures += latency(R, kb * 1024, &us);
    if (rank == 0)
      std::printf("LATENCY %s bf16 sum %zu KB: %.2f us per all-reduce (CUDA graph, median of 100 replays, %d ranks, %d threads/block)\n",
                  R.path->transportName(), kb, us, nranks, ctx.threads);
  }
  std::string asyncWhy;
  if (R.path->asyncError(&asyncWhy) != rcnSuccess) {
    std::fprintf(stderr, "rank %d: async error: %s\n", rank, asyncWhy.c_str());
    ++failures;
  }
  R.path.reset();
  cudaFree(R.dsend);
  cudaFree(R.drecv);
  cudaStreamDestroy(R.stream);
  return failures;
}

void runAll(const char* wire, bool measure = true) {
  requireGpus(2);
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  auto outcomes = runRanks(2, [&](int rank) { return runRank(id, rank, 2, wire, measure); }, 240);
  checkRanks(outcomes);
}

// The proxy path as users reach it: ROCENANTE_TRANSPORT=proxy, rcnCommInitRank,
// rcnAllReduce on device buffers, rcnCommQuery.
int runApiRank(const rcnUniqueId& id, int rank, int nranks) {
  CUDA_OK(cudaSetDevice(rankDevice(rank)));
  setenv("ROCENANTE_TRANSPORT", "proxy", 1);
  setenv("ROCENANTE_WIRE", "shm", 1);
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, nranks, id, rank) != rcnSuccess) return 60;
  rcnCommInfo info{};
  if (rcnCommQuery(comm, &info) != rcnSuccess) return 61;
  if (info.path != rcnPathProxy || std::string(info.transport) != "proxy-shm") {
    std::fprintf(stderr, "rank %d: path %d transport '%s' reason '%s'\n", rank, info.path,
                 info.transport, info.reason);
    return 62;
  }
  const size_t count = 12288;
  uint8_t *dsend = nullptr, *drecv = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dsend), count * 4));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&drecv), count * 4));
  int failures = 0;
  for (uint64_t seed = 9000; seed < 9004; ++seed) {
    auto in = rankInput(seed, rank, nranks, count, rcnFloat32, rcnSum);
    std::vector<uint8_t> out(in.size());
    CUDA_OK(copyToDevice(dsend, in.data(), in.size()));
    if (!poisonDevice(drecv, in.size())) return 90;
    if (rcnAllReduce(dsend, drecv, count, rcnFloat32, rcnSum, comm, nullptr) != rcnSuccess) return 63;
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out.data(), drecv, out.size(), cudaMemcpyDeviceToHost));
    failures += checkAgainstReference(out.data(), seed, nranks, count, rcnFloat32, rcnSum, "api") != 0;
  }
  rcnResult_t async = rcnInProgress;
  if (rcnCommGetAsyncError(comm, &async) != rcnSuccess || async != rcnSuccess) ++failures;
  if (rcnCommDestroy(comm) != rcnSuccess) ++failures;
  cudaFree(dsend);
  cudaFree(drecv);
  return failures;
}

// Rank 1 dies between calls; rank 0 keeps calling and must get an async error
// naming rank 1 well within the timeout, with every kernel returning.
int runKilledPeerRank(const rcnUniqueId& id, int rank, const char* wire) {
  CUDA_OK(cudaSetDevice(rankDevice(rank)));
  setenv("ROCENANTE_WIRE", wire, 1);
  auto bs = joinBootstrap(id, rank, 2);
  if (!bs) return 70;
  FastPathContext ctx = hostContext(bs.get(), kMaxBytes, 5000);
  ctx.cudaDev = rankDevice(rank);
  ctx.maxBlocks = 32;
  ctx.threads = 512;
  std::unique_ptr<FastPath> path;
  std::string why;
  if (createProxyPath(ctx, &path, &why) != rcnSuccess || !path) return 71;
  float* buf = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), 1 << 16));
  CUDA_OK(cudaMemset(buf, 0, 1 << 16));
  auto start = std::chrono::steady_clock::now();
  for (int call = 0; call < 200; ++call) {
    if (rank == 1 && call == 20) raise(SIGKILL);
    // A call after the error is recorded returns it instead of launching.
    const rcnResult_t launched = path->allReduce(buf, buf, 16384, rcnFloat32, rcnSum, nullptr);
    if (launched == rcnSuccess) CUDA_OK(cudaDeviceSynchronize());
    const rcnResult_t async = path->asyncError(&why);
    if (async == rcnSuccess && launched != rcnSuccess) return 72;
    if (launched != rcnSuccess && launched != rcnRemoteError) return 76;
    if (async != rcnSuccess) {
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "rank %d: async error after %.2f s: %s\n", rank, took, why.c_str());
      return why.find("rank 1") != std::string::npos && took < 4.0 ? 0 : 73;
    }
  }
  return rank == 1 ? 74 : 75;  // the survivor never saw the error
}

}  // namespace

void runKilledPeer(const char* wire) {
  requireGpus(2);
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  auto outcomes = runRanks(2, [&](int rank) { return runKilledPeerRank(id, rank, wire); }, 60);
  std::string report;
  allSucceeded(outcomes, &report);
  INFO(report);
  CHECK(outcomes[1].signal == SIGKILL);
  CHECK(outcomes[0].exitCode == 0);
  CHECK_FALSE(outcomes[0].timedOut);
}

TEST_CASE("proxy path: a peer killed mid-run gives the survivor an async error, no hang", "[gpu][proxy][fault]") {
  runKilledPeer("shm");
}

TEST_CASE("proxy path, GPU memory: a peer killed mid-run gives the survivor an async error", "[gpu][proxy][fault][gdr]") {
  runKilledPeer("cuda");
}

TEST_CASE("proxy path through the public API (ROCENANTE_TRANSPORT=proxy)", "[gpu][proxy][api]") {
  requireOwnGpus(2);
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  auto outcomes = runRanks(2, [&](int rank) { return runApiRank(id, rank, 2); }, 120);
  checkRanks(outcomes);
}

TEST_CASE("proxy path over shm: 2 GPUs, every dtype and op, graph replay, latency", "[gpu][proxy]") {
  runAll("shm");
}

TEST_CASE("proxy path over tcp: 2 GPUs, every dtype and op, graph replay, latency", "[gpu][proxy]") {
  runAll("tcp");
}

TEST_CASE("proxy path over the cuda wire (GPU-memory regions, staged LL): every dtype and op, graph replay", "[gpu][proxy][gdr]") {
  runAll("cuda");
}

// The LL lines are zeroed every ROCENANTE_PROXY_SCRUB_CALLS calls (default
// 2^14); every 4 calls here, so scrubbing a line still in use would show as
// a wrong result or a timeout.
TEST_CASE("proxy path with its LL lines scrubbed every 4 calls, host and GPU memory", "[gpu][proxy][scrub]") {
  ScopedEnv scrub("ROCENANTE_PROXY_SCRUB_CALLS", "4");
  runAll("shm", /*measure=*/false);
  runAll("cuda", /*measure=*/false);
}
