// SPDX-License-Identifier: BSD-3-Clause
// rcnAllReduceResidualRmsNorm on the host backend (no GPU): every rank's
// outputs are bit-identical, equal to rcnAllReduce's sum followed by the CPU
// mirror of the norm kernel, and within the fp64 bounds of the unfused
// sequence; bad arguments are refused by name; ranks whose calls differ fail.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "support/reference.h"
#include "support/residual_norm_reference.h"
#include "support/scoped_env.h"

using namespace rcn::test;

namespace {

// The communicator's ranks as threads of this process (the host backend
// takes host pointers), each running body(rank, comm).
void onEveryRank(int nranks, const char* wire, const std::function<void(int, rcnComm_t)>& body) {
  ScopedEnv host("ROCENANTE_BACKEND", "host"), via("ROCENANTE_WIRE", wire);
  std::vector<rcnComm_t> comms(nranks, nullptr);
  REQUIRE(rcnCommInitAll(comms.data(), nranks, nullptr) == rcnSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) threads.emplace_back([&, r] { body(r, comms[r]); });
  for (auto& t : threads) t.join();
  for (rcnComm_t comm : comms) CHECK(rcnCommDestroy(comm) == rcnSuccess);
}

// Each rank's result of one call, poisoned before.
std::vector<NormOutputs> runCase(const NormCase& c, const std::vector<rcnComm_t>& comms, const NormInputs& in,
                                 std::vector<rcnResult_t>* results) {
  const int nranks = int(comms.size());
  std::vector<NormOutputs> out(nranks);
  results->assign(nranks, rcnInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      out[r].residual = in.residual;
      out[r].normOut.assign(c.tokens * c.hidden * (c.normType == rcnFloat8e4m3 ? 1 : 2), kPoisonByte);
      (*results)[r] = rcnAllReduceResidualRmsNorm(
          in.partial[r].data(), out[r].residual.data(), in.weight.data(), out[r].normOut.data(), c.tokens, c.hidden,
          c.dtype, c.normType, c.normType == rcnFloat8e4m3 ? &c.scale : nullptr, c.eps, comms[r], nullptr);
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

TEST_CASE("the fused residual norm on the host backend matches the unfused sequence", "[host][api][norm]") {
  std::vector<NormCase> cases;
  for (rcnDataType_t t : {rcnBfloat16, rcnFloat16})
    for (bool fp8 : {false, true})
      for (auto [tokens, hidden] : {std::pair<size_t, size_t>{1, 4096}, {3, 1001}, {2, 33}, {8, 5120}, {1, 8192}}) {
        NormCase c;
        c.tokens = tokens;
        c.hidden = hidden;
        c.dtype = t;
        c.normType = fp8 ? rcnFloat8e4m3 : t;
        c.eps = hidden == 33 ? 0.5f : 1e-5f;
        c.scale = 0.008f;  // norms up to ~4 reach past e4m3's 448: some saturate
        cases.push_back(c);
      }
  uint64_t seed = 7;
  for (auto [nranks, wire] : {std::pair<int, const char*>{2, "shm"}, {3, "tcp"}}) {
    ScopedEnv host("ROCENANTE_BACKEND", "host"), via("ROCENANTE_WIRE", wire);
    std::vector<rcnComm_t> comms(nranks, nullptr);
    REQUIRE(rcnCommInitAll(comms.data(), nranks, nullptr) == rcnSuccess);
    for (const NormCase& c : cases) {
      INFO(describe(c) << ", " << nranks << " ranks over " << wire);
      const NormInputs in = makeNormInputs(c, nranks, ++seed);
      std::vector<rcnResult_t> results;
      const std::vector<NormOutputs> out = runCase(c, comms, in, &results);
      const NormOutputs expected = expectedNormOutputs(c, in);
      for (int r = 0; r < nranks; ++r) {
        INFO("rank " << r);
        REQUIRE(results[r] == rcnSuccess);
        CHECK(firstDifference(out[r], expected) == "");
        CHECK(checkNormAgainstFp64(c, in, out[r]) == "");
      }
    }
    for (rcnComm_t comm : comms) CHECK(rcnCommDestroy(comm) == rcnSuccess);
  }
}

TEST_CASE("the fused residual norm refuses bad arguments by name", "[host][api][norm]") {
  ScopedEnv host("ROCENANTE_BACKEND", "host");
  rcnComm_t comm = nullptr;
  REQUIRE(rcnCommInitAll(&comm, 1, nullptr) == rcnSuccess);
  std::vector<uint16_t> send(64), residual(64), weight(16), out(64);
  std::vector<uint8_t> out8(64);
  const float scale = 1.0f;
  struct Bad {
    const char* expect;  // in rcnGetLastError
    std::function<rcnResult_t()> call;
  };
  auto call = [&](const void* s, void* res, const void* w, void* o, size_t tokens, size_t hidden, rcnDataType_t t,
                  rcnDataType_t nt, const float* sc, float eps) {
    return rcnAllReduceResidualRmsNorm(s, res, w, o, tokens, hidden, t, nt, sc, eps, comm, nullptr);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Bad> bad = {
      {"is not rcnBfloat16 or rcnFloat16",
       [&] {
         return call(send.data(), residual.data(), weight.data(), out.data(), 4, 16, rcnFloat32, rcnFloat32, nullptr,
                     1e-5f);
       }},
      {"normType",
       [&] {
         return call(send.data(), residual.data(), weight.data(), out.data(), 4, 16, rcnBfloat16, rcnFloat16, nullptr,
                     1e-5f);
       }},
      {"needs normScale",
       [&] {
         return call(send.data(), residual.data(), weight.data(), out8.data(), 4, 16, rcnBfloat16, rcnFloat8e4m3,
                     nullptr, 1e-5f);
       }},
      {"normScale is given",
       [&] {
         return call(send.data(), residual.data(), weight.data(), out.data(), 4, 16, rcnBfloat16, rcnBfloat16, &scale,
                     1e-5f);
       }},
      {"eps=",
       [&] {
         return call(send.data(), residual.data(), weight.data(), out.data(), 4, 16, rcnBfloat16, rcnBfloat16, nullptr,
                     -1.0f);
       }},
      {"eps=",
       [&] {
         return call(send.data(), residual.data(), weight.data(), out.data(), 4, 16, rcnBfloat16, rcnBfloat16, nullptr,
                     nan);
       }},
      {"hidden is 0",
       [&] {
         return call(send.data(), residual.data(), weight.data(), out.data(), 4, 0, rcnBfloat16, rcnBfloat16, nullptr,
                     1e-5f);
       }},
      {"overflows",
       [&] {
         return call(send.data(), residual.data(), weight.data(), out.data(), SIZE_MAX / 2, 16, rcnBfloat16,
                     rcnBfloat16, nullptr, 1e-5f);
       }},
      {"is NULL",
       [&] {
         return call(send.data(), nullptr, weight.data(), out.data(), 4, 16, rcnBfloat16, rcnBfloat16, nullptr, 1e-5f);
       }},
      {"residual",
       [&] {
         return call(send.data(), send.data(), weight.data(), out.data(), 4, 16, rcnBfloat16, rcnBfloat16, nullptr,
                     1e-5f);
       }},
      {"normOut",
       [&] {
         return call(send.data(), residual.data(), weight.data(), send.data() + 8, 4, 16, rcnBfloat16, rcnBfloat16,
                     nullptr, 1e-5f);
       }},
      {"aligned",
       [&] {
         return call(reinterpret_cast<const char*>(send.data()) + 1, residual.data(), weight.data(), out.data(), 4, 8,
                     rcnBfloat16, rcnBfloat16, nullptr, 1e-5f);
       }},
  };
  for (const Bad& b : bad) {
    INFO(b.expect);
    CHECK(b.call() == rcnInvalidArgument);
    CHECK(std::string(rcnGetLastError(comm)).find(b.expect) != std::string::npos);
  }
  // No tokens: nothing to do, whatever the buffers.
  CHECK(call(nullptr, nullptr, nullptr, nullptr, 0, 16, rcnBfloat16, rcnBfloat16, nullptr, 1e-5f) == rcnSuccess);
  CHECK(rcnCommDestroy(comm) == rcnSuccess);
  CHECK(rcnAllReduceResidualRmsNorm(send.data(), residual.data(), weight.data(), out.data(), 4, 16, rcnBfloat16,
                                    rcnBfloat16, nullptr, 1e-5f, comm, nullptr) == rcnInvalidArgument);
}

TEST_CASE("ranks whose fused residual norm calls differ all fail", "[host][api][norm]") {
  ScopedEnv timeout("ROCENANTE_TIMEOUT_MS", "5000");
  NormCase c;
  c.tokens = 2;
  c.hidden = 64;
  const NormInputs in = makeNormInputs(c, 2, 1);
  std::vector<rcnResult_t> results(2, rcnSuccess);
  onEveryRank(2, "shm", [&](int r, rcnComm_t comm) {
    std::vector<uint8_t> residual = in.residual, out(in.residual.size());
    // Rank 1 normalizes one token fewer.
    results[r] = rcnAllReduceResidualRmsNorm(in.partial[r].data(), residual.data(), in.weight.data(), out.data(),
                                             c.tokens - r, c.hidden, c.dtype, c.dtype, nullptr, c.eps, comm, nullptr);
  });
  CHECK(results[0] == rcnInvalidUsage);
  CHECK(results[1] == rcnInvalidUsage);
}
