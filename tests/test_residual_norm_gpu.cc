// SPDX-License-Identifier: BSD-3-Clause
// rcnAllReduceResidualRmsNorm on GPUs: two ranks of one process
// (rcnCommInitAll; with ROCENANTE_TEST_SHARE_GPUS=1 both on one GPU, without
// NCCL). The fused p2p kernel and the composed path (the all-reduce, then
// the norm kernel) give the exact bits of rcnAllReduce's sum followed by the
// CPU mirror of the norm, on every rank, within the fp64 bounds of the
// unfused sequence, eagerly and replayed in CUDA graphs; a rank whose call
// differs fails both; one rank alone; and NCCL's all-reduce plus our norm
// where the fast path is off (two GPUs of its own).
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "core/residual_norm.h"
#include "support/gpu_case.h"
#include "support/reference.h"
#include "support/residual_norm_reference.h"
#include "support/scoped_env.h"

using namespace rcn::test;

namespace {

constexpr int kRanks = 2;

size_t outBytes(const NormCase& c) { return c.tokens * c.hidden * (c.normType == rcnFloat8e4m3 ? 1 : 2); }

// One rank's device buffers for one case.
struct RankBuffers {
  int device = 0;
  cudaStream_t stream = nullptr;
  void *send = nullptr, *residual = nullptr, *weight = nullptr, *normOut = nullptr;
  float* scale = nullptr;

  void allocate(const NormCase& c) {
    const size_t rows = c.tokens * c.hidden * 2;
    REQUIRE(cudaSetDevice(device) == cudaSuccess);
    if (!stream) REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaMalloc(&send, rows) == cudaSuccess);
    REQUIRE(cudaMalloc(&residual, rows) == cudaSuccess);
    REQUIRE(cudaMalloc(&weight, c.hidden * 2) == cudaSuccess);
    REQUIRE(cudaMalloc(&normOut, outBytes(c)) == cudaSuccess);
    REQUIRE(cudaMalloc(&scale, sizeof(float)) == cudaSuccess);
  }
  // Inputs in, the outputs poisoned; waits for the copies.
  void upload(const NormCase& c, const std::vector<uint8_t>& partial, const std::vector<uint8_t>& residualIn,
              const NormInputs& in) {
    REQUIRE(cudaSetDevice(device) == cudaSuccess);
    REQUIRE(copyToDevice(send, partial.data(), partial.size()) == cudaSuccess);
    REQUIRE(copyToDevice(residual, residualIn.data(), residualIn.size()) == cudaSuccess);
    REQUIRE(copyToDevice(weight, in.weight.data(), in.weight.size()) == cudaSuccess);
    REQUIRE(copyToDevice(scale, &c.scale, sizeof(float)) == cudaSuccess);
    REQUIRE(poisonDevice(normOut, outBytes(c)));
  }
  NormOutputs download(const NormCase& c) {
    REQUIRE(cudaSetDevice(device) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    NormOutputs out{std::vector<uint8_t>(c.tokens * c.hidden * 2), std::vector<uint8_t>(outBytes(c))};
    REQUIRE(cudaMemcpy(out.residual.data(), residual, out.residual.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(cudaMemcpy(out.normOut.data(), normOut, out.normOut.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
  rcnResult_t call(const NormCase& c, rcnComm_t comm) const {
    return rcnAllReduceResidualRmsNorm(send, residual, weight, normOut, c.tokens, c.hidden, c.dtype, c.normType,
                                       c.normType == rcnFloat8e4m3 ? scale : nullptr, c.eps, comm,
                                       reinterpret_cast<rcnStream_t>(stream));
  }
  void release() {
    cudaSetDevice(device);
    for (void* p : {send, residual, weight, normOut, static_cast<void*>(scale)}) cudaFree(p);
    send = residual = weight = normOut = nullptr;
    scale = nullptr;
  }
  ~RankBuffers() {
    release();
    if (stream) cudaStreamDestroy(stream);
  }
};

std::vector<NormCase> everyCase() {
  std::vector<NormCase> cases;
  for (rcnDataType_t t : {rcnBfloat16, rcnFloat16})
    for (bool fp8 : {false, true})
      for (auto [tokens, hidden] : {std::pair<size_t, size_t>{1, 4096},
                                    {2, 8192},
                                    {8, 4096},
                                    {8, 8192},
                                    {3, 1001},
                                    {5, 2052},
                                    {1, 12},
                                    {40, 2048},
                                    {2, 12288}}) {  // past the rows kept in registers
        NormCase c;
        c.tokens = tokens;
        c.hidden = hidden;
        c.dtype = t;
        c.normType = fp8 ? rcnFloat8e4m3 : t;
        c.scale = 0.008f;
        cases.push_back(c);
      }
  return cases;
}

// Runs `replays` calls of c on every rank (eagerly, or captured once in a
// graph per rank and replayed) and checks each rank's outputs against the
// exact bits and the fp64 bounds. The residual carries from call to call.
void checkCase(const NormCase& c, rcnComm_t* comms, std::vector<RankBuffers>& ranks, uint64_t seed, int replays,
               bool graph) {
  const int nranks = int(ranks.size());
  const NormInputs in = makeNormInputs(c, nranks, seed);
  for (RankBuffers& r : ranks) r.allocate(c);
  for (int r = 0; r < nranks; ++r) ranks[r].upload(c, in.partial[r], in.residual, in);
  std::vector<cudaGraphExec_t> execs(nranks, nullptr);
  if (graph) {
    for (int r = 0; r < nranks; ++r) {
      REQUIRE(cudaSetDevice(ranks[r].device) == cudaSuccess);
      cudaGraph_t g = nullptr;
      REQUIRE(cudaStreamBeginCapture(ranks[r].stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      const rcnResult_t result = ranks[r].call(c, comms[r]);
      REQUIRE(cudaStreamEndCapture(ranks[r].stream, &g) == cudaSuccess);
      REQUIRE(result == rcnSuccess);
      REQUIRE(cudaGraphInstantiate(&execs[r], g, 0) == cudaSuccess);
      cudaGraphDestroy(g);
    }
  }
  NormInputs expectedIn = in;
  for (int k = 0; k < replays; ++k) {
    for (int r = 0; r < nranks; ++r) {
      REQUIRE(cudaSetDevice(ranks[r].device) == cudaSuccess);
      if (graph) REQUIRE(cudaGraphLaunch(execs[r], ranks[r].stream) == cudaSuccess);
      else REQUIRE(ranks[r].call(c, comms[r]) == rcnSuccess);
    }
    const NormOutputs expected = expectedNormOutputs(c, expectedIn);
    for (int r = 0; r < nranks; ++r) {
      INFO("rank " << r << ", call " << k);
      const NormOutputs got = ranks[r].download(c);
      CHECK(firstDifference(got, expected) == "");
      CHECK(checkNormAgainstFp64(c, expectedIn, got) == "");
    }
    expectedIn.residual = expected.residual;
  }
  for (cudaGraphExec_t e : execs)
    if (e) cudaGraphExecDestroy(e);
  for (RankBuffers& r : ranks) r.release();
}

void initPair(rcnComm_t (&comms)[kRanks], std::vector<RankBuffers>& ranks) {
  int devices[kRanks];
  for (int r = 0; r < kRanks; ++r) devices[r] = ranks[r].device = rankDevice(r);
  NativeNcclUnlessShared ncclRule(kRanks);
  REQUIRE(rcnCommInitAll(comms, kRanks, devices) == rcnSuccess);
}

void expectHealthy(rcnComm_t comm) {
  rcnResult_t async = rcnInternalError;
  REQUIRE(rcnCommGetAsyncError(comm, &async) == rcnSuccess);
  CHECK(async == rcnSuccess);
}

}  // namespace

TEST_CASE("fused and composed residual norm give the unfused sequence's bits on p2p", "[gpu][p2p][api][norm]") {
  requireGpus(kRanks);
  ScopedEnv force("ROCENANTE_FORCE", "rocenante"), transport("ROCENANTE_TRANSPORT", "p2p");
  // llMax: the default takes every case that fits in one kernel; 4 KB sends
  // most to the composed path (the flags all-reduce, then the norm kernel).
  for (const char* llMax : {"262144", "4096"}) {
    ScopedEnv ll("ROCENANTE_LL_MAX_BYTES", llMax);
    std::vector<RankBuffers> ranks(kRanks);
    rcnComm_t comms[kRanks] = {};
    initPair(comms, ranks);
    uint64_t seed = 1;
    for (const NormCase& c : everyCase()) {
      INFO(describe(c) << ", LL up to " << llMax);
      const rcn::ResidualNormCall call = rcn::residualNormCall(nullptr, nullptr, nullptr, nullptr, c.tokens, c.hidden,
                                                               c.dtype, c.normType, nullptr, 0);
      const bool fused = c.hidden % 4 == 0 && c.tokens * c.hidden * 2 <= std::stoul(llMax);
      CHECK(rcn::commFusesResidualNorm(comms[0], call, nullptr) == fused);
      checkCase(c, comms, ranks, ++seed, 2, false);
      if (c.tokens <= 8) checkCase(c, comms, ranks, ++seed, 3, true);
    }
    for (rcnComm_t comm : comms) expectHealthy(comm);
    for (rcnComm_t comm : comms) CHECK(rcnCommDestroy(comm) == rcnSuccess);
  }
}

TEST_CASE("a rank whose call is a plain all-reduce fails both ranks", "[gpu][p2p][api][norm]") {
  requireGpus(kRanks);
  ScopedEnv force("ROCENANTE_FORCE", "rocenante"), transport("ROCENANTE_TRANSPORT", "p2p"),
      timeout("ROCENANTE_TIMEOUT_MS", "3000");
  std::vector<RankBuffers> ranks(kRanks);
  rcnComm_t comms[kRanks] = {};
  initPair(comms, ranks);
  NormCase c;
  c.tokens = 2;
  c.hidden = 4096;
  const NormInputs in = makeNormInputs(c, kRanks, 99);
  for (int r = 0; r < kRanks; ++r) {
    ranks[r].allocate(c);
    ranks[r].upload(c, in.partial[r], in.residual, in);
  }
  REQUIRE(ranks[0].call(c, comms[0]) == rcnSuccess);
  REQUIRE(cudaSetDevice(ranks[1].device) == cudaSuccess);
  REQUIRE(rcnAllReduce(ranks[1].send, ranks[1].normOut, c.tokens * c.hidden, c.dtype, rcnSum, comms[1],
                       reinterpret_cast<rcnStream_t>(ranks[1].stream)) == rcnSuccess);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaSetDevice(ranks[r].device) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(ranks[r].stream) == cudaSuccess);
    rcnResult_t async = rcnSuccess;
    REQUIRE(rcnCommGetAsyncError(comms[r], &async) == rcnSuccess);
    INFO("rank " << r << ": " << rcnGetLastError(comms[r]));
    CHECK(async == rcnInvalidUsage);
  }
  for (RankBuffers& r : ranks) r.release();
  for (rcnComm_t comm : comms) CHECK(rcnCommAbort(comm) == rcnSuccess);
}

TEST_CASE("one rank alone: the fused kernel normalizes its own rows, a copy past its size", "[gpu][p2p][api][norm]") {
  requireGpus(1);
  // Without NCCL beside it the fast path takes a lone rank's calls too.
  ScopedEnv noNccl("ROCENANTE_NATIVE_NCCL", "0"), transport("ROCENANTE_TRANSPORT", "p2p");
  std::vector<RankBuffers> ranks(1);
  rcnComm_t comm = nullptr;
  int device = 0;
  REQUIRE(rcnCommInitAll(&comm, 1, &device) == rcnSuccess);
  uint64_t seed = 500;
  for (const NormCase& c : everyCase()) {
    INFO(describe(c));
    const rcn::ResidualNormCall call =
        rcn::residualNormCall(nullptr, nullptr, nullptr, nullptr, c.tokens, c.hidden, c.dtype, c.normType, nullptr, 0);
    CHECK(rcn::commFusesResidualNorm(comm, call, nullptr) == (c.hidden % 4 == 0));
    checkCase(c, &comm, ranks, ++seed, 2, false);
  }
  // Past the fast path's size (a prefill's rows): a lone rank's all-reduce
  // is a copy, then our norm kernel, with no NCCL to fall back to.
  for (rcnDataType_t normType : {rcnBfloat16, rcnFloat8e4m3}) {
    NormCase big;
    big.tokens = 128;
    big.normType = normType;
    big.scale = 0.008f;
    INFO(describe(big));
    const rcn::ResidualNormCall call = rcn::residualNormCall(nullptr, nullptr, nullptr, nullptr, big.tokens, big.hidden,
                                                             big.dtype, big.normType, nullptr, 0);
    CHECK_FALSE(rcn::commFusesResidualNorm(comm, call, nullptr));
    checkCase(big, &comm, ranks, ++seed, 2, false);
    checkCase(big, &comm, ranks, ++seed, 2, true);
  }
  expectHealthy(comm);
  CHECK(rcnCommDestroy(comm) == rcnSuccess);
}

TEST_CASE("with the fast path off, NCCL's all-reduce and our norm give the same contract", "[gpu][api][norm]") {
  requireOwnGpus(kRanks);
  ScopedEnv disable("ROCENANTE_DISABLE", "1");
  std::vector<RankBuffers> ranks(kRanks);
  rcnComm_t comms[kRanks] = {};
  initPair(comms, ranks);
  rcnCommInfo info;
  REQUIRE(rcnCommQuery(comms[0], &info) == rcnSuccess);
  REQUIRE(info.path == rcnPathNccl);
  uint64_t seed = 900;
  for (const NormCase& c : everyCase()) {
    INFO(describe(c));
    const NormInputs in = makeNormInputs(c, kRanks, ++seed);
    for (int r = 0; r < kRanks; ++r) {
      ranks[r].allocate(c);
      ranks[r].upload(c, in.partial[r], in.residual, in);
    }
    // A thread a rank: NCCL may block one GPU's call until its peers call too.
    std::vector<rcnResult_t> results(kRanks, rcnInternalError);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r)
      threads.emplace_back([&, r] {
        if (cudaSetDevice(ranks[r].device) == cudaSuccess) results[r] = ranks[r].call(c, comms[r]);
      });
    for (auto& t : threads) t.join();
    for (rcnResult_t result : results) REQUIRE(result == rcnSuccess);
    // NCCL's sum is not ours bit for bit in general: the fp64 bounds and
    // identical ranks are the contract here.
    const NormOutputs first = ranks[0].download(c);
    CHECK(checkNormAgainstFp64(c, in, first) == "");
    CHECK(firstDifference(first, ranks[1].download(c)) == "");
    for (RankBuffers& r : ranks) r.release();
  }
  for (rcnComm_t comm : comms) CHECK(rcnCommDestroy(comm) == rcnSuccess);
}
