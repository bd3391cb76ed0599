// SPDX-License-Identifier: BSD-3-Clause
// rcnAllGather and rcnReduceScatter on GPUs, over the p2p path and the
// proxy path (shm wire, and the cuda wire's regions in GPU memory), one
// process per GPU (or, under ROCENANTE_TEST_SHARE_GPUS=1, two processes on
// one GPU without NCCL): every type (every op for reduce-scatter), out of place and in place,
// unaligned buffers, eager and replayed from a CUDA graph, p2p's largest
// share (its LL limit, set to a size that is not whole units); each result exact
// against the CPU reference over poisoned outputs, each reduce-scatter block
// bit-identical to rcnAllReduce's, every all-gather the same bytes on every
// rank; and ranks that make different collectives both fail.
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives_check.h"
#include "p2p_harness.h"
#include "support/gpu.h"
#include "support/gpu_case.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/reference.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kBufferBytes = 1 << 20;  // each device buffer: every case fits with room to shift
constexpr rcnDataType_t kAllTypes[] = {rcnInt8,    rcnUint8,   rcnInt32,   rcnUint32,   rcnInt64,      rcnUint64,
                                       rcnFloat16, rcnFloat32, rcnFloat64, rcnBfloat16, rcnFloat8e4m3, rcnFloat8e5m2};
constexpr rcnRedOp_t kAllOps[] = {rcnSum, rcnProd, rcnMax, rcnMin, rcnAvg};
// The p2p path's LL limit here, so its largest share (this many bytes) is
// known: not a multiple of 8, so the share's last line, at the end of what
// the peer's slot holds, carries half a unit.
constexpr size_t kP2pLlMaxBytes = 65540;

// One rank's device buffers and stream.
struct Device {
  uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  uint8_t* reduced = nullptr;
  cudaStream_t stream = nullptr;
};

// How a case runs: eager, or captured once and replayed (twice, fresh inputs each time).
enum class Mode { Eager, Graph };

// Runs `call` eagerly, or captures it into a graph and launches that; then waits.
template <typename Call>
bool runOnce(Device& d, Mode mode, const Call& call) {
  if (mode == Mode::Eager) {
    if (call() != rcnSuccess) return false;
  } else {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return false;
    const rcnResult_t captured = call();
    if (cudaStreamEndCapture(d.stream, &graph) != cudaSuccess || captured != rcnSuccess) return false;
    const bool launched =
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && cudaGraphLaunch(exec, d.stream) == cudaSuccess;
    if (exec) cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    if (!launched) return false;
  }
  return cudaStreamSynchronize(d.stream) == cudaSuccess;
}

// shift: elements the buffers start past their 256-byte aligned base (unaligned vectors).
int allGatherCase(rcnComm_t comm, Device& d, int rank, size_t count, rcnDataType_t t, bool inPlace, size_t shift,
                  Mode mode, uint64_t seed) {
  const size_t share = count * dtypeSize(t);
  const std::vector<uint8_t> mine = rankInput(seed, rank, kRanks, count, t, rcnSum);
  uint8_t* recv = d.recv + shift * dtypeSize(t);
  uint8_t* send = inPlace ? recv + size_t(rank) * share : d.send + shift * dtypeSize(t);
  CHILD_CHECK(poisonDevice(d.recv, kBufferBytes), "poison");
  CHILD_CHECK(copyToDevice(send, mine.data(), share) == cudaSuccess, "copy in");
  CHILD_CHECK(runOnce(d, mode, [&] { return rcnAllGather(send, recv, count, t, comm, d.stream); }),
              "all-gather %s %zu: %s", dtypeName(t), count, rcnGetLastError(comm));
  std::vector<uint8_t> got(share * kRanks + 64);
  CHILD_CHECK(cudaMemcpy(got.data(), recv, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess, "copy out");
  CHILD_CHECK(checkAllGather(got.data(), seed, kRanks, count, t, "p2p") == 0, "all-gather %s %zu in place %d shift %zu",
              dtypeName(t), count, inPlace, shift);
  for (size_t i = share * kRanks; i < got.size(); ++i)
    CHILD_CHECK(got[i] == kPoisonByte, "all-gather %s %zu wrote past its output", dtypeName(t), count);
  return 0;
}

int reduceScatterCase(rcnComm_t comm, Device& d, int rank, size_t count, rcnDataType_t t, rcnRedOp_t op, bool inPlace,
                      size_t shift, Mode mode, uint64_t seed) {
  const size_t share = count * dtypeSize(t);
  const std::vector<uint8_t> input = reduceScatterInput(seed, rank, kRanks, count, t, op);
  uint8_t* send = d.send + shift * dtypeSize(t);
  uint8_t* recv = inPlace ? send + size_t(rank) * share : d.recv + shift * dtypeSize(t);
  CHILD_CHECK(poisonDevice(d.recv, kBufferBytes) && poisonDevice(d.reduced, kBufferBytes), "poison");
  CHILD_CHECK(copyToDevice(send, input.data(), input.size()) == cudaSuccess, "copy in");
  // The all-reduce of the same buffers first (in place overwrites send).
  CHILD_CHECK(rcnAllReduce(send, d.reduced, count * kRanks, t, op, comm, d.stream) == rcnSuccess, "all-reduce: %s",
              rcnGetLastError(comm));
  CHILD_CHECK(runOnce(d, mode, [&] { return rcnReduceScatter(send, recv, count, t, op, comm, d.stream); }),
              "reduce-scatter %s %s %zu: %s", dtypeName(t), opName(op), count, rcnGetLastError(comm));
  std::vector<uint8_t> got(share + 64), reduced(input.size());
  CHILD_CHECK(cudaMemcpy(got.data(), recv, inPlace ? share : got.size(), cudaMemcpyDeviceToHost) == cudaSuccess,
              "copy out");
  CHILD_CHECK(cudaMemcpy(reduced.data(), d.reduced, reduced.size(), cudaMemcpyDeviceToHost) == cudaSuccess, "copy out");
  CHILD_CHECK(checkReduceScatter(got.data(), seed, kRanks, rank, count, t, op, "p2p") == 0,
              "reduce-scatter %s %s %zu in place %d shift %zu", dtypeName(t), opName(op), count, inPlace, shift);
  CHILD_CHECK(std::memcmp(got.data(), reduced.data() + size_t(rank) * share, share) == 0,
              "reduce-scatter %s %s %zu differs from the all-reduce's block", dtypeName(t), opName(op), count);
  if (!inPlace)
    for (size_t i = share; i < got.size(); ++i)
      CHILD_CHECK(got[i] == kPoisonByte, "reduce-scatter %s %zu wrote past its output", dtypeName(t), count);
  return 0;
}

// Where a case runs: the p2p path, or the proxy path over a wire.
struct Transport {
  const char* name;  // ROCENANTE_TRANSPORT
  const char* wire;  // ROCENANTE_WIRE (proxy only)
  rcnPath_t path;
};
constexpr Transport kP2p{"p2p", "auto", rcnPathP2p};

rcnComm_t forcedComm(const rcnUniqueId& id, int rank, const Transport& where) {
  setenv("ROCENANTE_FORCE", "rocenante", 1);  // every eligible call on the fast path
  setenv("ROCENANTE_TRANSPORT", where.name, 1);
  setenv("ROCENANTE_WIRE", where.wire, 1);
  if (where.path == rcnPathP2p) setenv("ROCENANTE_LL_MAX_BYTES", std::to_string(kP2pLlMaxBytes).c_str(), 1);
  if (cudaSetDevice(rankDevice(rank)) != cudaSuccess) return nullptr;
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, kRanks, id, rank) != rcnSuccess) return nullptr;
  rcnCommInfo info{};
  if (rcnCommQuery(comm, &info) != rcnSuccess || info.path != where.path) return nullptr;
  return comm;
}

int collectivesRank(const rcnUniqueId& id, int rank, const Transport& where) {
  rcnComm_t comm = forcedComm(id, rank, where);
  CHILD_CHECK(comm != nullptr, "init on the %s path: %s", where.name, rcnGetLastError(nullptr));
  Device d;
  CHILD_CHECK(cudaMalloc(reinterpret_cast<void**>(&d.send), kBufferBytes) == cudaSuccess &&
                  cudaMalloc(reinterpret_cast<void**>(&d.recv), kBufferBytes) == cudaSuccess &&
                  cudaMalloc(reinterpret_cast<void**>(&d.reduced), kBufferBytes) == cudaSuccess &&
                  cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking) == cudaSuccess,
              "allocation");
  uint64_t seed = 7000;
  for (rcnDataType_t t : kAllTypes)
    for (size_t count : {size_t(1), size_t(5), size_t(777), size_t(8192)})
      for (bool inPlace : {false, true}) {
        const size_t shift = count == 777 ? 1 : 0;
        const Mode mode = count == 5 ? Mode::Graph : Mode::Eager;
        if (allGatherCase(comm, d, rank, count, t, inPlace, shift, mode, ++seed)) return 1;
        for (rcnRedOp_t op : kAllOps)
          if (reduceScatterCase(comm, d, rank, count, t, op, inPlace, shift, mode, ++seed)) return 1;
      }
  // The largest share p2p takes, in bytes and in floats, unaligned out of place.
  if (where.path == rcnPathP2p)
    for (rcnDataType_t t : {rcnUint8, rcnFloat32})
      for (bool inPlace : {false, true}) {
        const size_t count = kP2pLlMaxBytes / dtypeSize(t), shift = inPlace ? 0 : 1;
        if (allGatherCase(comm, d, rank, count, t, inPlace, shift, Mode::Eager, ++seed)) return 1;
        if (reduceScatterCase(comm, d, rank, count, t, rcnSum, inPlace, shift, Mode::Eager, ++seed)) return 1;
      }
  rcnResult_t async = rcnInternalError;
  CHILD_CHECK(rcnCommGetAsyncError(comm, &async) == rcnSuccess && async == rcnSuccess, "async error %d", int(async));
  CHILD_CHECK(rcnCommDestroy(comm) == rcnSuccess, "destroy");
  return 0;
}

// Rank 0 all-gathers while rank 1 reduce-scatters: the kernels see each
// other's tags (the signature names the collective), both record the
// mismatch, rcnCommGetAsyncError returns rcnInvalidUsage on both.
int differentCallsRank(const rcnUniqueId& id, int rank) {
  setenv("ROCENANTE_TIMEOUT_MS", "5000", 1);
  rcnComm_t comm = forcedComm(id, rank, kP2p);
  CHILD_CHECK(comm != nullptr, "init on the p2p path: %s", rcnGetLastError(nullptr));
  void* buf = nullptr;
  CHILD_CHECK(cudaMalloc(&buf, 4096) == cudaSuccess && cudaMemset(buf, 0, 4096) == cudaSuccess, "allocation");
  uint8_t* b = static_cast<uint8_t*>(buf);
  const rcnResult_t launched = rank == 0 ? rcnAllGather(b, b + 1024, 64, rcnFloat32, comm, nullptr)
                                         : rcnReduceScatter(b, b + 1024, 64, rcnFloat32, rcnSum, comm, nullptr);
  CHILD_CHECK(launched == rcnSuccess, "launch: %s", rcnGetLastError(comm));
  cudaDeviceSynchronize();
  rcnResult_t async = rcnSuccess;
  CHILD_CHECK(rcnCommGetAsyncError(comm, &async) == rcnSuccess && async == rcnInvalidUsage, "async error %d",
              int(async));
  const std::string why = rcnGetLastError(comm);
  CHILD_CHECK(why.find("made a different call") != std::string::npos, "%s", why.c_str());
  CHILD_CHECK(rcnCommAbort(comm) == rcnSuccess, "abort");
  return 0;
}

}  // namespace

TEST_CASE("rcnAllGather and rcnReduceScatter over p2p: every type and op, in place, graphs", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared ncclRule(kRanks);
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(
      kRanks, [&](int rank) { return collectivesRank(id, rank, kP2p); }, 500));
}

TEST_CASE("rcnAllGather and rcnReduceScatter over the proxy path: shm and cuda wires", "[proxy][gpu][api]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared ncclRule(kRanks);
  for (const Transport where : {Transport{"proxy", "shm", rcnPathProxy}, Transport{"proxy", "cuda", rcnPathProxy}}) {
    INFO(where.wire);
    rcnUniqueId id;
    REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
    checkRanks(runRanks(
        kRanks, [&](int rank) { return collectivesRank(id, rank, where); }, 500));
  }
}

TEST_CASE("Ranks that make different collectives over p2p both fail", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared ncclRule(kRanks);
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(
      kRanks, [&](int rank) { return differentCallsRank(id, rank); }, 120));
}
