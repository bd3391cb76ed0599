// SPDX-License-Identifier: BSD-3-Clause
// The engine's matrix-vector kernels (gemv.h) against a double-precision CPU
// product of the same bf16 values: plain (bf16 and fp32 output), with SwiGLU
// fused, with the residual add + RMSNorm fused in front (1-2 tokens), with
// the QKV epilogue; 1-2 tokens (CUDA cores) and 3-8 (tensor cores); shapes that
// leave partial chunks, outputs that fill no whole tile, shapes that give a
// warp several rows, and the benchmark's products at TP=2. Every
// launch overlaps the previous kernel (programmatic dependent launch), and
// the input vector is written by that previous kernel, so a GEMV that read
// it too early would see the NaN poison. The all-reduce fused into a plain
// product, one rank of several on one GPU. Then the row kernels (add + RMSNorm,
// embedding), the multi-block argmax and the attention builds' occupancy.
#include <catch2/catch_test_macros.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_plan.h"
#include "gemv.h"
#include "gpu_kernels.h"
#include "support/gpu_case.h"
#include "support/rank_checks.h"
#include "support/reference.h"

using namespace engine;

namespace {

// The GEMV's input: x itself, or RMSNorm(residual + x) with the new residual
// written to residualOut.
GemvInput gemvInput(bool norm, const void* x, const float* residual, const void* normWeight, float* residualOut,
                    float eps) {
  return norm ? normedInput(residual, x, normWeight, residualOut, eps) : vectorInput(x);
}

float bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<float> download(const void* device, size_t n, bool isFloat) {
  std::vector<float> out(n);
  if (isFloat) {
    cudaMemcpy(out.data(), device, n * 4, cudaMemcpyDeviceToHost);
    return out;
  }
  std::vector<uint16_t> raw(n);
  cudaMemcpy(raw.data(), device, n * 2, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) out[i] = bf16ToFloat(raw[i]);
  return out;
}

// One GEMV case: its shape, epilogue, output type and whether the add +
// RMSNorm is fused in front.
struct Case {
  int out, in, tokens;
  bool swiGlu, floatOut;
  bool norm = false;  // input = RMSNorm(residual + x) * weight
};

// What the fused norm must compute from residual, delta and weight, in double.
std::vector<double> normalized(const std::vector<float>& residual, const std::vector<float>& delta,
                               const std::vector<float>& weight, int tokens, int in, float eps) {
  std::vector<double> out(size_t(tokens) * in);
  for (int b = 0; b < tokens; ++b) {
    double squares = 0;
    for (int i = 0; i < in; ++i) {
      const double v = double(residual[size_t(b) * in + i]) + delta[size_t(b) * in + i];
      squares += v * v;
    }
    const double scale = 1.0 / std::sqrt(squares / in + eps);
    for (int i = 0; i < in; ++i)
      out[size_t(b) * in + i] = (double(residual[size_t(b) * in + i]) + delta[size_t(b) * in + i]) * scale * weight[i];
  }
  return out;
}

// The GEMV's input as the kernel must have used it, in double, and the
// relative rounding it carries: x itself, or (fused norm) RMSNorm(residual + x)
// * weight, rounded to bf16 by the kernel. `wrongResiduals` counts the
// entries of residualOut that are not residual + x (the first 5 printed).
struct ExpectedInput {
  std::vector<double> values;
  double rounding = 0;
  int wrongResiduals = 0;
};
ExpectedInput expectedInput(const GemvInput& input, const std::vector<float>& x, int tokens, int in) {
  ExpectedInput e;
  e.values.assign(x.begin(), x.end());
  if (!input.normed()) return e;
  const size_t count = size_t(tokens) * in;
  const std::vector<float> r = download(input.residual, count, true), rOut = download(input.residualOut, count, true);
  for (size_t i = 0; i < count; ++i)
    if (!(rOut[i] == r[i] + x[i]) && ++e.wrongResiduals <= 5)
      std::printf("residual out [%zu] = %.9g, want %.9g\n", i, rOut[i], r[i] + x[i]);
  e.values = normalized(r, x, download(input.normWeight, in, false), tokens, in, input.eps);
  e.rounding = 1.0 / 256;
  return e;
}

// Row r of W (rows of `in`) times token b's input, in double, and the sum of
// its terms' magnitudes (what fp32 accumulation and input rounding scale with).
std::pair<double, double> dotWithMagnitude(const std::vector<float>& w, const std::vector<double>& input, int r, int b,
                                           int in) {
  double sum = 0, magnitude = 0;
  for (int k = 0; k < in; ++k) {
    const double term = double(w[size_t(r) * in + k]) * input[size_t(b) * in + k];
    sum += term;
    magnitude += std::fabs(term);
  }
  return {sum, magnitude};
}

// One case in a fresh process; returns 0 when every output is within the
// bound of fp32 accumulation plus the final rounding of the output type.
int runCase(const Case& c) {
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  const int rows = c.swiGlu ? 2 * c.out : c.out;
  const size_t weightCount = size_t(rows) * c.in, xCount = size_t(c.tokens) * c.in;
  // x sits at the end of a large buffer that one slow kernel fills, right
  // before the GEMV: the GEMV must wait for all of it.
  const size_t fillCount = (size_t(64) << 20) + xCount;
  void *w = nullptr, *fill = nullptr, *y = nullptr, *normWeight = nullptr;
  float *residual = nullptr, *residualOut = nullptr;
  const size_t yBytes = size_t(c.tokens) * c.out * (c.floatOut ? 4 : 2);
  RANK_EXPECT(cudaMalloc(&w, weightCount * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&fill, fillCount * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&y, yBytes) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&normWeight, c.in * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&residual, xCount * 4) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&residualOut, xCount * 4) == cudaSuccess);
  cudaStream_t stream;
  RANK_EXPECT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const Launch on{stream, true};
  // Weights are written by plain launches, finished before the GEMV starts:
  // it reads its first weights before it waits for the previous kernel.
  const Launch plain{stream, false};
  RANK_EXPECT(launchRandomFill(DType::BF16, w, weightCount, 11 + c.out, 0.05f, 0.0f, plain) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::BF16, normWeight, c.in, 5, 0.5f, 1.0f, on) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::F32, residual, xCount, 7, 2.0f, 0.0f, on) == cudaSuccess);
  RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  RANK_EXPECT(cudaMemsetAsync(fill, 0xff, fillCount * 2, stream) == cudaSuccess);  // NaN
  RANK_EXPECT(cudaMemsetAsync(y, 0xff, yBytes, stream) == cudaSuccess);
  RANK_EXPECT(cudaMemsetAsync(residualOut, 0xff, xCount * 4, stream) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::BF16, fill, fillCount, 97 + c.in, 1.0f, 0.0f, on) == cudaSuccess);
  const void* x = static_cast<const uint16_t*>(fill) + (fillCount - xCount);
  const float eps = 1e-5f;
  const GemvInput input = gemvInput(c.norm, x, residual, normWeight, residualOut, eps);
  cudaError_t launched = c.swiGlu ? launchGemvSwiGlu(input, y, w, c.tokens, c.out, c.in, on)
                                  : launchGemv(input, y, c.floatOut, w, c.tokens, c.out, c.in, on);
  RANK_EXPECT(launched == cudaSuccess);
  RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);

  std::vector<float> W = download(w, weightCount, false);
  std::vector<float> X = download(x, xCount, false);
  std::vector<float> Y = download(y, size_t(c.tokens) * c.out, c.floatOut);
  const ExpectedInput expected = expectedInput(input, X, c.tokens, c.in);
  int bad = expected.wrongResiduals;
  for (int b = 0; b < c.tokens; ++b) {
    for (int row = 0; row < c.out; ++row) {
      auto dot = [&](int r) {
        const auto [sum, magnitude] = dotWithMagnitude(W, expected.values, r, b, c.in);
        return std::pair<double, double>(sum, magnitude * (1e-5 + expected.rounding));
      };
      auto [want, bound] = dot(row);  // bound: fp32 accumulation and the input's rounding
      if (c.swiGlu) {
        auto [up, upBound] = dot(row + c.out);
        const double silu = want / (1.0 + std::exp(-want));
        bound = bound * (std::fabs(up) + 1) + upBound * (std::fabs(silu) + 1);
        want = silu * up;
      }
      if (!c.floatOut) bound += std::fabs(want) / 256.0;  // bf16 output rounding
      const float got = Y[size_t(b) * c.out + row];
      if (!(std::fabs(got - want) <= bound + 1e-6)) {
        if (++bad <= 5)
          std::printf("out %d in %d tokens %d%s%s: y[%d][%d] = %.7g, want %.7g (bound %.3g)\n", c.out, c.in,
                      c.tokens, c.swiGlu ? " swiglu" : "", c.norm ? " norm" : "", b, row, got, want, bound);
      }
    }
  }
  cudaFree(normWeight);
  cudaFree(residual);
  cudaFree(residualOut);
  cudaFree(w);
  cudaFree(fill);
  cudaFree(y);
  cudaStreamDestroy(stream);
  return bad ? 1 : 0;
}

void check(const Case& c) {
  std::ostringstream what;
  what << "out " << c.out << " in " << c.in << " tokens " << c.tokens << (c.swiGlu ? " swiglu" : "")
       << (c.norm ? " norm" : "");
  rcn::test::checkInOneRank([&] { return runCase(c); }, what.str());
}

}  // namespace

TEST_CASE("GEMV: bf16 and fp32 outputs, 1 and 2 tokens, against a double-precision product", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  // in = 2056: 257 16-byte vectors, one past two chunks of 32 lanes x 4 loads;
  // 8401 rows: more than the resident warps (2112 on H200), so each warp
  // takes several (at 1 token in pairs of rows, the last one alone), 99 % of
  // the warps busy; 20001: pairs, bf16 out. 9001 rows keep only 71 % of the
  // warps busy at 1 token (pairs) on H200, so they run on tensor cores
  // (gemv.cu, kMinBusyShare), as every plain product of 2 tokens does
  // (launchPlain; the CUDA-core one of 2 tokens is the all-reduce's, below).
  for (Case c : {Case{96, 160, 1, false, false}, Case{8401, 2056, 1, false, true}, Case{8401, 2056, 2, false, false},
                 Case{9001, 2056, 1, false, true}, Case{9001, 2056, 2, false, false},
                 Case{300, 4096, 2, false, true}, Case{4096, 14336, 1, false, false},
                 Case{20001, 2056, 1, false, false}})
    check(c);
}

TEST_CASE("GEMV with SwiGLU fused: silu(gate . x) * (up . x)", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  for (Case c : {Case{160, 96, 1, true, false}, Case{5000, 2056, 2, true, false}, Case{7168, 4096, 1, true, false}})
    check(c);
}

TEST_CASE("GEMV with the residual add + RMSNorm fused in front", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  // The last two: the widest rows whose staging fits (gemvFits: 34128 at 1 token, 25600 at 2).
  // 7168 x 4096 with SwiGLU (llama3-8b's gate/up at TP=2) and 7000 x 4096 (a
  // last block partly idle) have their units cut in two along K on H200 (splitShortens).
  for (Case c : {Case{6144, 4096, 1, false, false, true}, Case{300, 96, 2, false, true, true},
                 Case{7168, 4096, 2, true, false, true}, Case{7168, 4096, 1, true, false, true},
                 Case{7000, 4096, 1, true, false, true}, Case{64, 34128, 1, false, true, true},
                 Case{40, 25600, 2, true, false, true}})
    check(c);
}

// Tensor cores (3-8 tokens). in = 160 and 2056: a last chunk of one step, a
// last step of one 16-byte vector; 11712: long rows (92 chunks, the last of
// two steps); 9001, 300 and 4099 outputs: a last tile with some rows missing
// (16 outputs a tile for Plain, 8 for the pairs).
TEST_CASE("GEMV on tensor cores: 3-8 tokens, bf16 and fp32 outputs", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  for (Case c : {Case{96, 160, 3, false, false}, Case{9001, 2056, 5, false, true}, Case{9001, 2056, 8, false, false},
                 Case{300, 4096, 3, false, true}, Case{37, 2048, 4, false, false}, Case{1000, 11712, 8, false, false}})
    check(c);
}

// Plain inputs larger than shared memory could hold (they are never staged):
// llama3-8b's down product at TP=1 (8 rows of 14336), in = 11720 (a last
// chunk of 9 vectors, its last step of one), a last tile with rows missing,
// SwiGLU; 1-2 tokens of 65536 on CUDA cores.
TEST_CASE("GEMV with plain inputs too large to stage", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  for (Case c : {Case{4096, 14336, 8, false, false}, Case{1000, 11720, 8, false, true},
                 Case{4099, 14336, 7, false, false}, Case{300, 11720, 8, true, false},
                 Case{37, 65536, 3, false, true}, Case{300, 65536, 1, false, true}, Case{77, 65536, 2, true, false}})
    check(c);
}

TEST_CASE("GEMV on tensor cores with SwiGLU fused", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  // 7 outputs: no whole tile; 4240: a last chunk of two vectors; then llama3-8b TP=1 gate/up.
  for (Case c : {Case{160, 96, 3, true, false}, Case{4099, 2056, 5, true, false}, Case{7, 4240, 8, true, false},
                 Case{14336, 4096, 8, true, false}})
    check(c);
}

// The products of the benchmark's decode step at TP=2 (llama3-1b: dim 2048,
// hidden 8192; llama3-8b: 4096, 14336), each rank's half (at 3-8 tokens the
// norm runs in front as a kernel of its own); the QKV products are in the
// QKV test below.
TEST_CASE("GEMV on tensor cores: the llama3 products at TP=2", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  for (Case c : {Case{2048, 1024, 8, false, false},         // 1b O
                 Case{4096, 2048, 8, true, false},          // 1b gate/up + SwiGLU
                 Case{2048, 4096, 8, false, false},         // 1b down
                 Case{64128, 2048, 3, false, true},         // 1b LM head (vocab-parallel), fp32 logits
                 Case{4096, 2048, 5, false, false},         // 8b O
                 Case{7168, 4096, 8, true, false},          // 8b gate/up + SwiGLU
                 Case{4096, 7168, 8, false, false}})        // 8b down
    check(c);
}

// The all-reduce fused into a plain product (launchGemv's sumWith), on one
// GPU: this process is one rank of several, every window on this GPU, the
// other ranks' values for call 1 written into this rank's window beforehand
// (or never: the peer that does not arrive). The product must put its fp32
// outputs, tagged with call 1, into every window, write y = bf16 of the
// ranks' values added in rank order (bit for bit; at 3 ranks the others'
// values are +-2^24, so another order gives other bits: peerValue), and
// advance every block slot's call number; without the peers, every gather
// gives up after the timeout, y keeps its poison, and the error names rank 0.
struct SumCase {
  int out, in, tokens;
  int nranks = 2, rank = 1;
  bool peersArrive = true;
};

// Rank r's value at index i, for the ranks this process is not. At 3 ranks,
// +-2^24 plus even integers (exact in fp32) around this rank's small value:
// 2^24 + v rounds v to an even integer, -2^24 + v (v > 0) to an integer, so
// adding the ranks in another order changes the sum by up to 2.
float peerValue(int r, size_t i, int nranks) {
  if (nranks < 3) return float((i * 2654435761u + r) % 2001) / 500.0f - 2.0f;
  const float even = float(2 * ((i * 7 + r) % 16));
  return r == 0 ? 16777216.0f + even : -16777216.0f - even;
}

int runSumCase(const SumCase& c) {
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  const size_t values = size_t(c.tokens) * c.out, weightCount = size_t(c.out) * c.in, xCount = size_t(c.tokens) * c.in;
  constexpr int kMaxBlocks = 1024;
  rcnDeviceComm dev{};
  dev.rank = c.rank;
  dev.nranks = c.nranks;
  dev.maxValues = values;
  dev.maxBlocks = kMaxBlocks;
  dev.timeoutNs = c.peersArrive ? 5000000000ull : 50000000ull;
  const size_t windowBytes = 2 * size_t(c.nranks) * values * 8;  // [phase][from][maxValues] units
  void *w = nullptr, *x = nullptr, *y = nullptr, *flags = nullptr;
  cudaStream_t stream;
  RANK_EXPECT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&w, weightCount * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&x, xCount * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&y, values * 2) == cudaSuccess);
  // Zeroed on the product's own stream (a non-blocking one, which the legacy
  // stream's memsets would not be ordered before).
  for (int r = 0; r < c.nranks; ++r) {
    RANK_EXPECT(cudaMalloc(reinterpret_cast<void**>(&dev.window[r]), windowBytes) == cudaSuccess);
    RANK_EXPECT(cudaMemsetAsync(dev.window[r], 0, windowBytes, stream) == cudaSuccess);
  }
  // calls, failed, abort flag, error record: zeroed.
  const size_t flagBytes = kMaxBlocks * 4 + 4 + 4 + sizeof(rcnDeviceError);
  RANK_EXPECT(cudaMalloc(&flags, flagBytes) == cudaSuccess);
  RANK_EXPECT(cudaMemsetAsync(flags, 0, flagBytes, stream) == cudaSuccess);
  dev.calls = static_cast<uint32_t*>(flags);
  dev.failed = dev.calls + kMaxBlocks;
  dev.abortFlag = dev.failed + 1;
  dev.error = reinterpret_cast<rcnDeviceError*>(dev.calls + kMaxBlocks + 2);

  // Phase 1 (call 1) of owner's window, rank `from`'s part.
  auto part = [&](int owner, int from) { return dev.window[owner] + (size_t(1) * c.nranks + from) * values; };
  for (int r = 0; r < c.nranks && c.peersArrive; ++r) {
    if (r == c.rank) continue;
    std::vector<uint64_t> units(values);
    for (size_t i = 0; i < values; ++i) {
      const float v = peerValue(r, i, c.nranks);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      units[i] = (uint64_t(1) << 32) | bits;
    }
    RANK_EXPECT(cudaMemcpyAsync(part(c.rank, r), units.data(), values * 8, cudaMemcpyHostToDevice, stream) ==
                cudaSuccess);
    RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);  // `units` is freed at the end of the loop body
  }

  const Launch plain{stream, false}, on{stream, true};
  RANK_EXPECT(launchRandomFill(DType::BF16, w, weightCount, 21 + c.out, 0.05f, 0.0f, plain) == cudaSuccess);
  RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  RANK_EXPECT(cudaMemsetAsync(y, 0xff, values * 2, stream) == cudaSuccess);  // NaN
  RANK_EXPECT(launchRandomFill(DType::BF16, x, xCount, 3 + c.in, 1.0f, 0.0f, on) == cudaSuccess);
  RANK_EXPECT(launchGemv(vectorInput(x), y, false, w, c.tokens, c.out, c.in, on, &dev) == cudaSuccess);
  RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);

  const std::vector<float> W = download(w, weightCount, false), X = download(x, xCount, false);
  std::vector<uint16_t> Y(values);
  std::vector<std::vector<uint64_t>> own(c.nranks, std::vector<uint64_t>(values));  // this rank's part, per owner
  std::vector<uint32_t> calls(kMaxBlocks + 2);
  rcnDeviceError error{};
  RANK_EXPECT(cudaMemcpy(Y.data(), y, values * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int owner = 0; owner < c.nranks; ++owner)
    RANK_EXPECT(cudaMemcpy(own[owner].data(), part(owner, c.rank), values * 8, cudaMemcpyDeviceToHost) == cudaSuccess);
  RANK_EXPECT(cudaMemcpy(calls.data(), dev.calls, calls.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  RANK_EXPECT(cudaMemcpy(&error, dev.error, sizeof error, cudaMemcpyDeviceToHost) == cudaSuccess);
  int bad = 0;
  auto complain = [&](const char* what, size_t i) {
    if (++bad <= 5)
      std::printf("out %d in %d tokens %d rank %d of %d: %s at %zu\n", c.out, c.in, c.tokens, c.rank, c.nranks, what,
                  i);
  };
  const std::vector<double> input(X.begin(), X.end());
  for (size_t i = 0; i < values; ++i) {
    const int b = int(i / c.out), row = int(i % c.out);
    bool tagged = own[0][i] >> 32 == 1;
    for (int owner = 1; owner < c.nranks; ++owner) tagged = tagged && own[owner][i] == own[0][i];
    if (!tagged) complain("own unit not tagged 1 in every window", i);
    float mine;
    const uint32_t bits = uint32_t(own[0][i]);
    std::memcpy(&mine, &bits, 4);
    const auto [want, magnitude] = dotWithMagnitude(W, input, row, b, c.in);
    if (!(std::fabs(mine - want) <= magnitude * 1e-5 + 1e-6)) complain("own value off the product", i);
    float sum = 0;
    for (int r = 0; r < c.nranks; ++r) {
      const float v = r == c.rank ? mine : peerValue(r, i, c.nranks);
      sum = r == 0 ? v : sum + v;
    }
    const uint16_t expected = c.peersArrive ? rcn::test::doubleToBf16(sum) : uint16_t(0xffff);
    if (Y[i] != expected) complain(c.peersArrive ? "y is not the sum in rank order" : "y written without peers", i);
  }
  const uint32_t failed = calls[kMaxBlocks];
  if (c.peersArrive) {
    for (int j = 0; j < kMaxBlocks; ++j)
      if (calls[j] != 1) complain("block slot not at call 1", j);
    if (failed != 0) complain("communicator failed", 0);
  } else if (failed != 1 || error.code != rcnWaitTimeout || error.peer != 0 || error.call != 1) {
    std::printf("missing peers: failed %u, error code %u peer %u call %u\n", failed, error.code, error.peer,
                error.call);
    ++bad;
  }
  for (int r = 0; r < c.nranks; ++r) cudaFree(dev.window[r]);
  cudaFree(flags);
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  cudaStreamDestroy(stream);
  return bad ? 1 : 0;
}

TEST_CASE("GEMV summing its outputs over the ranks (device API), one rank of several on one GPU", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  // llama3-8b's O at TP=2 (one token: pairs of rows), its down at 2 tokens,
  // llama3-1b's O (one token, single rows), a small product whose last block
  // is partly idle, pairs whose last block is partly idle (4200: 2100 pairs,
  // one a warp) and two pairs a warp (5000); rank 1 of 3 (the order shows,
  // but this rank's own value mostly rounds away against +-2^24: the 2-rank
  // cases check that it is added); and the peers that never arrive.
  for (SumCase c : {SumCase{4096, 2048, 1}, SumCase{4096, 7168, 2}, SumCase{2048, 1024, 1}, SumCase{300, 160, 1},
                    SumCase{1000, 2056, 2}, SumCase{4200, 1024, 1}, SumCase{5000, 1024, 1},
                    SumCase{4096, 2048, 1, 3, 1}, SumCase{1000, 2056, 2, 3, 1},
                    SumCase{4096, 2048, 1, 2, 1, false}, SumCase{300, 160, 2, 3, 2, false}}) {
    std::ostringstream what;
    what << "out " << c.out << " in " << c.in << " tokens " << c.tokens << " rank " << c.rank << " of " << c.nranks
         << (c.peersArrive ? "" : " peers missing");
    rcn::test::checkInOneRank([&] { return runSumCase(c); }, what.str());
  }
  // Refused: fp32 output, a normed input, 3 tokens, out % 4 != 0, more values than the window.
  rcnDeviceComm dev{};
  dev.nranks = 2;
  dev.maxValues = 4096;
  dev.maxBlocks = 1024;
  int dummy = 0;
  void* p = &dummy;
  const GemvInput normed = normedInput(nullptr, nullptr, nullptr, nullptr, 1e-5f);
  const Launch on{nullptr, true};
  CHECK(launchGemv(vectorInput(p), p, true, p, 1, 64, 64, on, &dev) == cudaErrorInvalidValue);
  CHECK(launchGemv(normed, p, false, p, 1, 64, 64, on, &dev) == cudaErrorInvalidValue);
  CHECK(launchGemv(vectorInput(p), p, false, p, 3, 64, 64, on, &dev) == cudaErrorInvalidValue);
  CHECK(launchGemv(vectorInput(p), p, false, p, 1, 66, 64, on, &dev) == cudaErrorInvalidValue);
  CHECK(launchGemv(vectorInput(p), p, false, p, 2, 4096, 64, on, &dev) == cudaErrorInvalidValue);
}

TEST_CASE("GEMV refuses what it cannot do", "[engine][gpu]") {
  CHECK_FALSE(gemvFits(9, 64));
  CHECK_FALSE(gemvFits(1, 60));
  CHECK_FALSE(gemvFits(0, 64));
  CHECK_FALSE(gemvFits(3, 0));
  CHECK(gemvFits(2, 64));
  CHECK_FALSE(gemvFits(3, 64));  // 3-8 tokens: plain inputs only (the norm runs in front)
  CHECK_FALSE(gemvFits(8, 64));
  CHECK(gemvFits(3, 64, false));
  CHECK(gemvFits(8, 4248, false));
  CHECK(gemvFits(8, 14336, false));  // a plain input is not staged: any size
  CHECK(gemvFits(3, 1 << 20, false));
  CHECK(gemvFits(1, 1 << 20, false));
  CHECK(gemvFits(1, 34128));  // the limits gemv.h names: norm staging for 1 and 2 tokens
  CHECK_FALSE(gemvFits(1, 34136));
  CHECK(gemvFits(2, 25600));
  CHECK_FALSE(gemvFits(2, 25608));
  // A launch it does not take is refused before anything runs.
  const GemvInput normed = normedInput(nullptr, nullptr, nullptr, nullptr, 1e-5f);
  const int someInput = 0;
  const GemvInput plain = vectorInput(&someInput);  // never read: refused first
  CHECK(launchGemv(normed, nullptr, false, nullptr, 3, 16, 64, Launch{}) == cudaErrorInvalidValue);
  CHECK(launchGemvSwiGlu(normed, nullptr, nullptr, 8, 16, 64, Launch{}) == cudaErrorInvalidValue);
  CHECK(launchGemv(plain, nullptr, false, nullptr, 9, 16, 64, Launch{}) == cudaErrorInvalidValue);
  QkvEpilogue qkv;
  qkv.shape = AttentionShape{1, 1, 64, 1, 0, 0, 64, 10000.0f, 1e-5f, false, nullptr};
  CHECK(launchGemvQkv(normed, nullptr, nullptr, qkv, 3, 64, Launch{}) == cudaErrorInvalidValue);
  qkv.shape.headDim = kAttentionMaxHeadDim + 2;  // more RoPE frequencies than the epilogue holds
  CHECK(launchGemvQkv(plain, nullptr, nullptr, qkv, 1, 64, Launch{}) == cudaErrorInvalidValue);
}

namespace {

// launchGemvQkv against a double-precision product + bias + RoPE, with q
// read back from the product's output and k, v from the cache. Token b sits
// in sequence tokens - 1 - b (a cache slot of its own) at positions[b].
struct QkvCase {
  int tokens;
  bool interleaved, bias, table;
  int heads = 8, kvHeads = 2, d = 128, in = 2056;
  bool norm = false;  // input = RMSNorm(residual + x) * weight, as the engine calls it
};

int runQkvCase(const QkvCase& c) {
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  const int heads = c.heads, kvHeads = c.kvHeads, d = c.d, in = c.in, maxContext = 64;
  const int rows = (heads + 2 * kvHeads) * d, qDim = heads * d;
  const int positions[8] = {5, 37, 63, 0, 12, 1, 40, 22};
  int seqs[8];
  for (int b = 0; b < c.tokens; ++b) seqs[b] = c.tokens - 1 - b;
  std::vector<float> freqs(d / 2);
  for (int i = 0; i < d / 2; ++i) freqs[i] = std::pow(500000.0f, -2.0f * i / d) / (i % 3 + 1);
  const size_t xCount = size_t(c.tokens) * in;
  void *w, *x, *bias, *qkv, *keys, *values, *normWeight;
  int *pos, *seq;
  float *table, *residual, *residualOut;
  const size_t cacheCount = size_t(c.tokens) * maxContext * kvHeads * d;
  RANK_EXPECT(cudaMalloc(&w, size_t(rows) * in * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&x, xCount * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&bias, rows * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&qkv, size_t(c.tokens) * rows * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&keys, cacheCount * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&values, cacheCount * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&normWeight, in * 2) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&residual, xCount * 4) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&residualOut, xCount * 4) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&pos, 8 * sizeof(int)) == cudaSuccess && cudaMalloc(&seq, 8 * sizeof(int)) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&table, d / 2 * 4) == cudaSuccess);
  // The positions start one behind: a kernel advances them right before the
  // product, behind a slow one, so an epilogue that read them before its wait
  // would rotate by the wrong angle.
  int behind[8];
  for (int b = 0; b < 8; ++b) behind[b] = positions[b] - 1;
  RANK_EXPECT(cudaMemcpy(pos, behind, 8 * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  RANK_EXPECT(cudaMemcpy(seq, seqs, c.tokens * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  int* tokenIds = nullptr;
  uint64_t* argmaxKeys = nullptr;
  void* slow = nullptr;
  const size_t slowCount = size_t(64) << 20;
  RANK_EXPECT(cudaMalloc(&tokenIds, 8 * sizeof(int)) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&argmaxKeys, 8 * sizeof(uint64_t)) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&slow, slowCount * 2) == cudaSuccess);
  RANK_EXPECT(cudaMemset(argmaxKeys, 0, 8 * sizeof(uint64_t)) == cudaSuccess);
  RANK_EXPECT(cudaMemcpy(table, freqs.data(), d / 2 * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  for (void* poisoned : {qkv, keys, values})
    RANK_EXPECT(cudaMemset(poisoned, 0xff, poisoned == qkv ? size_t(c.tokens) * rows * 2 : cacheCount * 2) ==
                cudaSuccess);
  RANK_EXPECT(cudaMemset(residualOut, 0xff, xCount * 4) == cudaSuccess);
  // The kernels run on a non-blocking stream, which does not wait for the
  // legacy stream's copies and poison above.
  RANK_EXPECT(cudaDeviceSynchronize() == cudaSuccess);
  cudaStream_t stream;
  RANK_EXPECT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const Launch on{stream, true};
  // Weights are written by plain launches: a GEMV reads its first weights
  // before it waits, so nothing overlapped may still be writing them.
  const Launch plain{stream, false};
  RANK_EXPECT(launchRandomFill(DType::BF16, w, size_t(rows) * in, 3, 0.05f, 0.0f, plain) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::BF16, bias, rows, 4, 0.5f, 0.0f, plain) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::BF16, normWeight, in, 6, 0.5f, 1.0f, plain) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::F32, residual, xCount, 7, 2.0f, 0.0f, plain) == cudaSuccess);
  RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::BF16, x, xCount, 5, 1.0f, 0.0f, on) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::BF16, slow, slowCount, 9, 1.0f, 0.0f, on) == cudaSuccess);
  RANK_EXPECT(launchTokensFromKeys(tokenIds, pos, argmaxKeys, nullptr, c.tokens, true, on) == cudaSuccess);
  QkvEpilogue e;
  e.place = TokenPlacement{nullptr, pos, seq};
  e.shape = AttentionShape{heads, kvHeads, d, heads / kvHeads, 0, 0, maxContext, 10000.0f, 1e-5f, c.interleaved,
                           c.table ? table : nullptr};
  e.bias = c.bias ? bias : nullptr;
  e.keyCache = keys;
  e.valueCache = values;
  const float eps = 1e-5f;
  const GemvInput input = gemvInput(c.norm, x, residual, normWeight, residualOut, eps);
  RANK_EXPECT(launchGemvQkv(input, qkv, w, e, c.tokens, in, on) == cudaSuccess);
  RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);

  const std::vector<float> W = download(w, size_t(rows) * in, false), X = download(x, xCount, false);
  const std::vector<float> B = download(bias, rows, false), Q = download(qkv, size_t(c.tokens) * rows, false);
  const std::vector<float> K = download(keys, cacheCount, false), V = download(values, cacheCount, false);
  const ExpectedInput expected = expectedInput(input, X, c.tokens, in);
  int bad = expected.wrongResiduals;
  for (int b = 0; b < c.tokens; ++b) {
    std::vector<double> y(rows), magnitude(rows);
    for (int r = 0; r < rows; ++r) {
      std::tie(y[r], magnitude[r]) = dotWithMagnitude(W, expected.values, r, b, in);
      if (c.bias) y[r] += B[r];
    }
    for (int head = 0; head < heads + kvHeads; ++head)  // RoPE on q and k heads
      for (int i = 0; i < d / 2; ++i) {
        const int a = head * d + (c.interleaved ? 2 * i : i), z = c.interleaved ? a + 1 : a + d / 2;
        const double angle = positions[b] * double(c.table ? freqs[i] : std::pow(10000.0, -2.0 * i / d));
        const double y0 = y[a], y1 = y[z];
        y[a] = y0 * std::cos(angle) - y1 * std::sin(angle);
        y[z] = y0 * std::sin(angle) + y1 * std::cos(angle);
        magnitude[a] = magnitude[z] = magnitude[a] + magnitude[z];
      }
    for (int r = 0; r < rows; ++r) {
      float got;
      if (r < qDim) {
        got = Q[size_t(b) * rows + r];
      } else {
        const int kv = (r - qDim) / d % kvHeads, j = (r - qDim) % d;
        const size_t at = ((size_t(seqs[b]) * maxContext + positions[b]) * kvHeads + kv) * d + j;
        got = r < qDim + kvHeads * d ? K[at] : V[at];
      }
      // fp32 accumulation (and the fused norm's rounding), bf16 output rounding
      const double bound = (1e-5 + expected.rounding) * magnitude[r] + std::fabs(y[r]) / 256 + 1e-4;
      if (!(std::fabs(got - y[r]) <= bound) && ++bad <= 5)
        std::printf("qkv token %d row %d: got %.7g want %.7g (bound %.3g)\n", b, r, got, y[r], bound);
    }
  }
  for (void* p : {w, x, bias, qkv, keys, values, normWeight, static_cast<void*>(residual),
                  static_cast<void*>(residualOut), static_cast<void*>(pos), static_cast<void*>(seq),
                  static_cast<void*>(table), static_cast<void*>(tokenIds), static_cast<void*>(argmaxKeys), slow})
    cudaFree(p);
  cudaStreamDestroy(stream);
  return bad ? 1 : 0;
}

void checkQkv(const QkvCase& c) {
  std::ostringstream what;
  what << "tokens " << c.tokens << (c.interleaved ? " interleaved" : " rotate-half") << (c.bias ? " bias" : "")
       << (c.table ? " table" : "") << " heads " << c.heads << "/" << c.kvHeads << " x " << c.d << " in " << c.in
       << (c.norm ? " norm" : "");
  rcn::test::checkInOneRank([&] { return runQkvCase(c); }, what.str());
}

}  // namespace

TEST_CASE("GEMV with the QKV epilogue fused: biases, RoPE (both conventions, table), KV cache", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  // llama3-8b at TP=2 and TP=1, norm in front; at TP=1 (3072 output pairs) the
  // units are cut in two along K on H200 (splitShortens).
  for (QkvCase c : {QkvCase{1, true, false, false}, QkvCase{2, false, true, true}, QkvCase{2, true, true, false},
                    QkvCase{2, false, true, true, 16, 4, 128, 4096, true},
                    QkvCase{1, false, false, false, 32, 8, 128, 4096, true},
                    QkvCase{2, true, true, true, 32, 8, 128, 4096, true}})
    checkQkv(c);
}

// 3-8 tokens (tensor cores). Heads of 6 (3 rotation pairs) give 15 outputs:
// no whole tile of 8. Then the benchmark's QKV products at TP=2 (llama3-1b:
// 16 + 2 x 4 heads of 64, in 2048; llama3-8b: of 128, in 4096).
TEST_CASE("GEMV on tensor cores with the QKV epilogue fused", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  for (QkvCase c : {QkvCase{3, true, false, false}, QkvCase{5, false, true, true}, QkvCase{8, true, true, false},
                    QkvCase{4, false, true, true, 3, 1, 6, 200}, QkvCase{7, true, false, true, 3, 1, 6, 96},
                    QkvCase{8, false, false, false, 16, 4, 64, 2048},
                    QkvCase{8, false, true, true, 16, 4, 128, 4096}})
    checkQkv(c);
}

namespace {

// launchArgmaxKey + launchTokensFromKeys over `seqs` rows of `vocab` random
// logits with planted winners: a tie of the largest value at two indices (the
// lower must win), a winner in the last logit, and a row of -inf but one.
// Two steps in a row, so the keys must come back to 0 in between. With
// `poison`, one row's logit is that (NaN or infinite), which must raise the
// non-finite flag; without, the flag stays 0.
int runArgmaxCase(int seqs, int vocab, int offset, float poison = 0.0f) {
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  std::vector<float> logits(size_t(seqs) * vocab);
  uint64_t state = 12345 + vocab;
  for (float& v : logits) v = float(int((state = state * 6364136223846793005ull + 1) >> 40) % 20000) / 1000.0f;
  std::vector<int> want(seqs);
  for (int b = 0; b < seqs; ++b) {
    float* row = logits.data() + size_t(b) * vocab;
    switch (b % 3) {
      case 0: row[vocab / 3] = row[vocab - 7] = 50.0f, want[b] = vocab / 3; break;
      case 1: row[vocab - 1] = 60.0f, want[b] = vocab - 1; break;
      default:
        for (int j = 0; j < vocab; ++j) row[j] = -INFINITY;
        row[vocab / 2] = -3.0f, want[b] = vocab / 2;
    }
  }
  const bool poisoned = poison != 0.0f;
  if (poisoned) logits[vocab / 5] = poison, want[0] = vocab / 5;  // row 0: a NaN or +inf wins
  float* deviceLogits = nullptr;
  uint64_t* keys = nullptr;
  int *tokens = nullptr, *pos = nullptr, *nonFinite = nullptr;
  RANK_EXPECT(cudaMalloc(&nonFinite, 4) == cudaSuccess);
  RANK_EXPECT(cudaMemset(nonFinite, 0, 4) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&deviceLogits, logits.size() * 4) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&keys, seqs * 8) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&tokens, seqs * 4) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&pos, seqs * 4) == cudaSuccess);
  RANK_EXPECT(cudaMemcpy(deviceLogits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  RANK_EXPECT(cudaMemset(keys, 0, seqs * 8) == cudaSuccess);
  RANK_EXPECT(cudaMemset(pos, 0, seqs * 4) == cudaSuccess);
  const Launch on{nullptr, true};
  for (int step = 1; step <= 2; ++step) {
    RANK_EXPECT(cudaMemset(tokens, 0xff, seqs * 4) == cudaSuccess);
    RANK_EXPECT(launchArgmaxKey(keys, deviceLogits, seqs, vocab, offset, on) == cudaSuccess);
    RANK_EXPECT(launchTokensFromKeys(tokens, pos, keys, nonFinite, seqs, true, on) == cudaSuccess);
    std::vector<int> got(seqs), positions(seqs);
    int flagged = -1;
    RANK_EXPECT(cudaMemcpy(&flagged, nonFinite, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    RANK_CHECK(flagged == (poisoned ? 1 : 0), "step %d: non-finite flag %d", step, flagged);
    std::vector<uint64_t> keysAfter(seqs);
    RANK_EXPECT(cudaMemcpy(got.data(), tokens, seqs * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    RANK_EXPECT(cudaMemcpy(positions.data(), pos, seqs * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    RANK_EXPECT(cudaMemcpy(keysAfter.data(), keys, seqs * 8, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int b = 0; b < seqs; ++b) {
      RANK_CHECK(got[b] == offset + want[b], "step %d row %d: token %d, want %d", step, b, got[b], offset + want[b]);
      RANK_CHECK(positions[b] == step, "row %d: position %d after step %d", b, positions[b], step);
      RANK_CHECK(keysAfter[b] == 0, "row %d: key not reset", b);
    }
  }
  cudaFree(deviceLogits), cudaFree(keys), cudaFree(tokens), cudaFree(pos), cudaFree(nonFinite);
  return 0;
}

// Steps back to back with no host sync, each step's logits written by a
// kernel (programmatic launch) right before its argmax, over logits poisoned
// with a huge value first: an argmax that read before the fill finished, or
// a key not reset between steps (step 2's best is below step 1's), gives a
// wrong token. Expected tokens come from the logits read back afterwards.
int runPipelinedArgmax(int seqs, int vocab) {
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  constexpr int kSteps = 3;
  const size_t count = size_t(seqs) * vocab;
  float* logits[kSteps] = {};
  int* tokens[kSteps] = {};
  uint64_t* keys = nullptr;
  int* pos = nullptr;
  for (int step = 0; step < kSteps; ++step) {
    RANK_EXPECT(cudaMalloc(&logits[step], count * 4) == cudaSuccess);
    RANK_EXPECT(cudaMalloc(&tokens[step], seqs * 4) == cudaSuccess);
    RANK_EXPECT(cudaMemset(logits[step], 0x7f, count * 4) == cudaSuccess);  // 3.4e38 everywhere
  }
  RANK_EXPECT(cudaMalloc(&keys, seqs * 8) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&pos, seqs * 4) == cudaSuccess);
  RANK_EXPECT(cudaMemset(keys, 0, seqs * 8) == cudaSuccess);
  RANK_EXPECT(cudaMemset(pos, 0, seqs * 4) == cudaSuccess);
  const Launch on{nullptr, true};
  for (int step = 0; step < kSteps; ++step) {
    const float scale = 1.0f / float(1 << step);  // each step's best below the last's
    RANK_EXPECT(launchRandomFill(DType::F32, logits[step], count, 31 + step, scale, 0.0f, on) == cudaSuccess);
    RANK_EXPECT(launchArgmaxKey(keys, logits[step], seqs, vocab, 0, on) == cudaSuccess);
    RANK_EXPECT(launchTokensFromKeys(tokens[step], pos, keys, nullptr, seqs, true, on) == cudaSuccess);
  }
  RANK_EXPECT(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<float> values(count);
  std::vector<int> got(seqs);
  for (int step = 0; step < kSteps; ++step) {
    RANK_EXPECT(cudaMemcpy(values.data(), logits[step], count * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    RANK_EXPECT(cudaMemcpy(got.data(), tokens[step], seqs * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int b = 0; b < seqs; ++b) {
      const float* row = values.data() + size_t(b) * vocab;
      const int want = int(std::max_element(row, row + vocab) - row);  // the first of equals
      RANK_CHECK(got[b] == want, "step %d row %d: token %d, want %d", step, b, got[b], want);
    }
  }
  for (int step = 0; step < kSteps; ++step) cudaFree(logits[step]), cudaFree(tokens[step]);
  cudaFree(keys), cudaFree(pos);
  return 0;
}

}  // namespace

// One block per 4096 logits and an atomicMax of keys: a llama3 vocabulary
// (31 blocks a row, the last one partial), its TP=2 slice with an offset,
// and a vocabulary smaller than one block; then steps in a pipeline.
TEST_CASE("argmax over many blocks: lowest index on ties, keys back to 0", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  rcn::test::checkInOneRank([] { return runArgmaxCase(3, 128256, 0); }, "3 rows of 128256");
  rcn::test::checkInOneRank([] { return runArgmaxCase(8, 64128, 64128); }, "8 rows of 64128 at 64128");
  rcn::test::checkInOneRank([] { return runArgmaxCase(2, 512, 0); }, "2 rows of 512");
  rcn::test::checkInOneRank([] { return runArgmaxCase(3, 4096, 0, NAN); }, "a NaN wins: flagged");
  rcn::test::checkInOneRank([] { return runArgmaxCase(3, 4096, 0, INFINITY); }, "+inf wins: flagged");
  rcn::test::checkInOneRank([] { return runPipelinedArgmax(8, 128256); }, "pipelined, 8 rows of 128256");
}

namespace {

// launchAddRmsNorm against a double-precision reference, and launchEmbedding
// against the table, for `rows` rows of `dim`: narrower than a block, exactly
// what the registers hold (512 threads x 16 values), and wider (the rest read
// again); with and without delta; with a rowIndex (the final norm's: every
// other row, backwards). delta sits at the end of a large buffer that one
// slow kernel fills right before the norm (programmatic launch): a norm that
// read it before its wait would see the poison.
int runRowKernels(DType t, int rows, int dim, bool withDelta, bool withIndex) {
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  const bool isFloat = t == DType::F32;
  const size_t count = size_t(rows) * dim, elem = isFloat ? 4 : 2;
  const int outRows = withIndex ? (rows + 1) / 2 : rows;
  std::vector<int> index(outRows);
  for (int r = 0; r < outRows; ++r) index[r] = withIndex ? rows - 1 - 2 * r : r;
  float *x = nullptr, *embedded = nullptr;
  void *fill = nullptr, *weight = nullptr, *out = nullptr;
  const size_t fillCount = (size_t(64) << 20) + count;
  int *rowIndex = nullptr, *tokens = nullptr;
  RANK_EXPECT(cudaMalloc(&x, count * 4) == cudaSuccess && cudaMalloc(&embedded, count * 4) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&fill, fillCount * elem) == cudaSuccess && cudaMalloc(&weight, dim * elem) == cudaSuccess);
  void* delta = static_cast<char*>(fill) + (fillCount - count) * elem;
  RANK_EXPECT(cudaMalloc(&out, count * elem) == cudaSuccess);
  RANK_EXPECT(cudaMalloc(&rowIndex, rows * 4) == cudaSuccess && cudaMalloc(&tokens, rows * 4) == cudaSuccess);
  RANK_EXPECT(cudaMemcpy(rowIndex, index.data(), outRows * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  std::vector<int> tokenOf(rows);
  for (int r = 0; r < rows; ++r) tokenOf[r] = (r * 7 + 3) % rows;  // rows of delta, used as a table
  RANK_EXPECT(cudaMemcpy(tokens, tokenOf.data(), rows * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  cudaStream_t stream;
  RANK_EXPECT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const Launch plain{stream, false}, on{stream, true};
  // The weight is read before the wait: written by a plain launch, finished first.
  RANK_EXPECT(launchRandomFill(t, weight, dim, 3, 0.5f, 1.0f, plain) == cudaSuccess);
  RANK_EXPECT(launchRandomFill(DType::F32, x, count, 5, 2.0f, 0.0f, plain) == cudaSuccess);
  RANK_EXPECT(cudaMemsetAsync(fill, 0x7f, fillCount * elem, stream) == cudaSuccess);  // huge values
  RANK_EXPECT(cudaMemsetAsync(out, 0xff, count * elem, stream) == cudaSuccess);
  RANK_EXPECT(cudaMemsetAsync(embedded, 0xff, count * 4, stream) == cudaSuccess);
  RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<float> x0 = download(x, count, true), w = download(weight, dim, isFloat);
  RANK_EXPECT(launchRandomFill(t, fill, fillCount, 7, 1.0f, 0.0f, on) == cudaSuccess);
  RANK_EXPECT(launchAddRmsNorm(t, out, x, withDelta ? delta : nullptr, weight, withIndex ? rowIndex : nullptr,
                               outRows, dim, 1e-5f, on) == cudaSuccess);
  RANK_EXPECT(launchEmbedding(t, embedded, delta, tokens, rows, dim, on) == cudaSuccess);
  RANK_EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<float> d = download(delta, count, isFloat), x1 = download(x, count, true);
  const std::vector<float> y = download(out, size_t(outRows) * dim, isFloat), e = download(embedded, count, true);
  int bad = 0;
  std::vector<bool> normed(rows, false);
  for (int r = 0; r < outRows; ++r) {
    const size_t row = size_t(index[r]);
    normed[row] = true;
    double squares = 0;
    for (int i = 0; i < dim; ++i) {
      const float v = withDelta ? x0[row * dim + i] + d[row * dim + i] : x0[row * dim + i];
      squares += double(v) * v;
    }
    const double scale = 1.0 / std::sqrt(squares / dim + 1e-5);
    for (int i = 0; i < dim; ++i) {
      const float v = withDelta ? x0[row * dim + i] + d[row * dim + i] : x0[row * dim + i];
      const double want = v * scale * w[i], got = y[size_t(r) * dim + i];
      const double bound = std::fabs(want) * (isFloat ? 1e-5 : 1.0 / 256) + 1e-6;
      if (!(std::fabs(got - want) <= bound) && ++bad <= 5)
        std::printf("dim %d row %d [%d]: out %.7g, want %.7g\n", dim, r, i, got, want);
    }
  }
  for (int row = 0; row < rows; ++row)
    for (int i = 0; i < dim; ++i) {
      const size_t at = size_t(row) * dim + i;
      const float want = withDelta && normed[row] ? x0[at] + d[at] : x0[at];  // only the normed rows take delta
      if (!(x1[at] == want) && ++bad <= 5)
        std::printf("dim %d x[%d][%d] = %.9g, want %.9g\n", dim, row, i, x1[at], want);
      const float table = d[size_t(tokenOf[row]) * dim + i];
      if (!(e[at] == table) && ++bad <= 5)
        std::printf("dim %d embedding[%d][%d] = %.9g, want %.9g\n", dim, row, i, e[at], table);
    }
  for (void* p : {static_cast<void*>(x), static_cast<void*>(embedded), fill, weight, out,
                  static_cast<void*>(rowIndex), static_cast<void*>(tokens)})
    cudaFree(p);
  cudaStreamDestroy(stream);
  return bad ? 1 : 0;
}

}  // namespace

TEST_CASE("add + RMSNorm and embedding rows: narrow, as wide as the registers hold, wider", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  for (DType t : {DType::BF16, DType::F32})
    for (int dim : {100, 4096, 8192, 9000})
      for (bool withIndex : {false, true}) {
        std::ostringstream what;
        what << (t == DType::F32 ? "fp32" : "bf16") << " dim " << dim << (withIndex ? " indexed" : "");
        rcn::test::checkInOneRank([&] { return runRowKernels(t, 5, dim, true, withIndex); }, what.str());
      }
  rcn::test::checkInOneRank([] { return runRowKernels(DType::BF16, 3, 9000, false, false); }, "no delta");
}

// The attention build for two blocks an SM must hold two at decode sizes
// (its 64 registers a thread allow it) and at the largest block
// attentionBlocksPerSm still gives it (its margin must cover the kernel's
// static arrays and the driver's share), and the one-block build at least
// one: else that choice would not give the one wave it is made for.
TEST_CASE("attention builds hold the blocks an SM they are built for", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  rcn::test::checkInOneRank([] {
    if (cudaSetDevice(0) != cudaSuccess) return 2;
    for (DType t : {DType::F32, DType::BF16})
      for (int headDim : {64, 128}) {
        // llama3 decode at prompt 128 + 100 steps: 236 positions, 4 splits
        const size_t shared = attentionPassBytes(236, headDim, 4);
        int one = 0, two = 0;
        RANK_EXPECT(attentionResidentBlocks(t, 1, shared, &one) == cudaSuccess);
        RANK_EXPECT(attentionResidentBlocks(t, 2, shared, &two) == cudaSuccess);
        std::printf("%s head size %d: build 1 holds %d, build 2 holds %d blocks an SM\n",
                    t == DType::F32 ? "fp32" : "bf16", headDim, one, two);
        RANK_CHECK(one >= 1 && two >= 2, "build 1 holds %d, build 2 holds %d", one, two);
      }
    int sms = 0, sharedPerSm = 0, blocks = 0;
    RANK_EXPECT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
    RANK_EXPECT(cudaDeviceGetAttribute(&sharedPerSm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0) == cudaSuccess);
    const size_t largest = size_t(sharedPerSm) / 2 - kAttentionSharedMargin;
    RANK_EXPECT(attentionBlocksPerSm(sms + 1, sms, largest, size_t(sharedPerSm)) == 2);
    RANK_EXPECT(attentionBlocksPerSm(sms + 1, sms, largest + 16, size_t(sharedPerSm)) == 1);
    for (DType t : {DType::F32, DType::BF16}) {
      RANK_EXPECT(attentionResidentBlocks(t, 2, largest, &blocks) == cudaSuccess);
      std::printf("build 2 with %zu bytes of shared memory a block: %d blocks an SM\n", largest, blocks);
      RANK_CHECK(blocks == 2, "build 2 holds %d blocks of %zu bytes", blocks, largest);
    }
    RANK_EXPECT(attentionResidentBlocks(DType::BF16, 3, 4096, &blocks) == cudaErrorInvalidValue);
    return 0;
  });
}
