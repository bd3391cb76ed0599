// SPDX-License-Identifier: BSD-3-Clause
// residual_norm_bench: what one GPU can say about rcnAllReduceResidualRmsNorm.
// One rank alone (no peer, so the exchange costs no link time): the kernel
// time of the fused call against the bare all-reduce, the all-reduce
// followed by the separate norm kernel, the norm kernel alone, and NCCL's
// (one-rank) all-reduce plus the norm kernel, each timed as a CUDA graph of
// many calls replayed several times (median per call, microseconds).
// The fused kernel's cost over the bare all-reduce is the column to watch;
// two-GPU numbers need two GPUs (scripts/gpu/residual_norm.sh).
//   residual_norm_bench [--fp8] [--fp16] [--tokens 1,2,4,8] [--hidden 2048,4096,8192]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/residual_norm.h"
#include "rocenante/rocenante.h"

namespace {

constexpr int kCallsPerGraph = 50;
constexpr int kReplays = 20;
constexpr int kRepeats = 7;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "residual_norm_bench: %s\n", what.c_str());
  std::exit(1);
}

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

void check(rcnResult_t r, const char* what) {
  if (r != rcnSuccess) die(std::string(what) + ": " + rcnGetErrorString(r) + ": " + rcnGetLastError(nullptr));
}

std::vector<size_t> parseList(const char* text) {
  std::vector<size_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0) die("not a list of positive numbers: " + std::string(text));
    values.push_back(size_t(v));
  }
  return values;
}

// A communicator of this process alone on GPU 0, made with `env` set.
rcnComm_t makeComm(const std::vector<std::pair<const char*, const char*>>& env) {
  for (auto [name, value] : env) setenv(name, value, 1);
  rcnComm_t comm = nullptr;
  int device = 0;
  check(rcnCommInitAll(&comm, 1, &device), "rcnCommInitAll");
  for (auto [name, value] : env) unsetenv(name);
  return comm;
}

// Median microseconds per call of `enqueue`, captured kCallsPerGraph times in one graph.
double timePerCall(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < kCallsPerGraph; ++i) enqueue();
  cuda(cudaStreamEndCapture(stream, &graph), "capture");
  cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaEvent_t start, stop;
  cuda(cudaEventCreate(&start), "event");
  cuda(cudaEventCreate(&stop), "event");
  cuda(cudaGraphLaunch(exec, stream), "warm-up");
  std::vector<double> perCall;
  for (int k = 0; k < kRepeats; ++k) {
    cuda(cudaEventRecord(start, stream), "event");
    for (int r = 0; r < kReplays; ++r) cuda(cudaGraphLaunch(exec, stream), "replay");
    cuda(cudaEventRecord(stop, stream), "event");
    cuda(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    cuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    perCall.push_back(1000.0 * ms / (kReplays * kCallsPerGraph));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(perCall.begin(), perCall.end());
  return perCall[perCall.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  rcnDataType_t dtype = rcnBfloat16;
  bool fp8 = false;
  std::vector<size_t> tokensList = {1, 2, 4, 8, 16}, hiddenList = {2048, 4096, 5120, 8192};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--fp8") fp8 = true;
    else if (arg == "--fp16") dtype = rcnFloat16;
    else if (arg == "--tokens" && i + 1 < argc) tokensList = parseList(argv[++i]);
    else if (arg == "--hidden" && i + 1 < argc) hiddenList = parseList(argv[++i]);
    else die("usage: residual_norm_bench [--fp8] [--fp16] [--tokens 1,2,4] [--hidden 4096,8192]");
  }
  const rcnDataType_t normType = fp8 ? rcnFloat8e4m3 : dtype;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) die("needs a GPU");
  cuda(cudaSetDevice(0), "cudaSetDevice");
  // The fast path alone (no NCCL behind it takes every size it holds, one
  // rank included), and NCCL alone (ROCENANTE_DISABLE).
  rcnComm_t fast = makeComm({{"ROCENANTE_NATIVE_NCCL", "0"}, {"ROCENANTE_TRANSPORT", "p2p"}});
  rcnComm_t nccl = makeComm({{"ROCENANTE_DISABLE", "1"}});
  rcnCommInfo info;
  check(rcnCommQuery(fast, &info), "rcnCommQuery");
  cudaStream_t stream;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaDeviceProp prop;
  cuda(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf(
      "# residual_norm_bench: one rank on %s (%s path), %s in, %s out; us per call, median of %d runs "
      "of %d graph replays x %d calls\n",
      prop.name, info.transport, dtype == rcnBfloat16 ? "bf16" : "fp16", fp8 ? "e4m3" : "the same", kRepeats, kReplays,
      kCallsPerGraph);
  std::printf("%7s %7s %10s %10s %10s %10s %12s %13s\n", "tokens", "hidden", "allreduce", "fused", "ar+norm", "norm",
              "nccl+norm", "fused-ar");
  for (size_t hidden : hiddenList)
    for (size_t tokens : tokensList) {
      const size_t rows = tokens * hidden * 2;
      void *send, *sum, *residual, *weight, *out;
      float* scale;
      cuda(cudaMalloc(&send, rows), "cudaMalloc");
      cuda(cudaMalloc(&sum, rows), "cudaMalloc");
      cuda(cudaMalloc(&residual, rows), "cudaMalloc");
      cuda(cudaMalloc(&weight, hidden * 2), "cudaMalloc");
      cuda(cudaMalloc(&out, rows), "cudaMalloc");
      cuda(cudaMalloc(reinterpret_cast<void**>(&scale), sizeof(float)), "cudaMalloc");
      // Zeros: the time does not depend on the values (1.0 for the scale).
      cuda(cudaMemset(send, 0, rows), "memset");
      cuda(cudaMemset(residual, 0, rows), "memset");
      cuda(cudaMemset(weight, 0, hidden * 2), "memset");
      const float one = 1.0f;
      cuda(cudaMemcpy(scale, &one, sizeof one, cudaMemcpyHostToDevice), "memcpy");
      const float* normScale = fp8 ? scale : nullptr;
      const rcnStream_t s = reinterpret_cast<rcnStream_t>(stream);
      const rcn::ResidualNormCall call =
          rcn::residualNormCall(nullptr, residual, weight, out, tokens, hidden, dtype, normType, normScale, 1e-5f);
      auto norm = [&] { check(rcn::launchResidualNorm(call, sum, true, stream), "launchResidualNorm"); };
      auto allReduce = [&] { check(rcnAllReduce(send, sum, tokens * hidden, dtype, rcnSum, fast, s), "rcnAllReduce"); };
      const double ar = timePerCall(stream, allReduce);
      const double fused = timePerCall(stream, [&] {
        check(rcnAllReduceResidualRmsNorm(send, residual, weight, out, tokens, hidden, dtype, normType, normScale,
                                          1e-5f, fast, s),
              "rcnAllReduceResidualRmsNorm");
      });
      const double composed = timePerCall(stream, [&] {
        allReduce();
        norm();
      });
      const double normOnly = timePerCall(stream, norm);
      const double ncclNorm = timePerCall(stream, [&] {
        check(rcnAllReduceResidualRmsNorm(send, residual, weight, out, tokens, hidden, dtype, normType, normScale,
                                          1e-5f, nccl, s),
              "rcnAllReduceResidualRmsNorm (NCCL)");
      });
      std::printf("%7zu %7zu %10.2f %10.2f %10.2f %10.2f %12.2f %+13.2f\n", tokens, hidden, ar, fused, composed,
                  normOnly, ncclNorm, fused - ar);
      std::fflush(stdout);
      for (void* p : {send, sum, residual, weight, out, static_cast<void*>(scale)}) cudaFree(p);
    }
  rcnResult_t async = rcnSuccess;
  check(rcnCommGetAsyncError(fast, &async), "rcnCommGetAsyncError");
  if (async != rcnSuccess) die(std::string("the fast path failed: ") + rcnGetLastError(fast));
  check(rcnCommDestroy(fast), "rcnCommDestroy");
  check(rcnCommDestroy(nccl), "rcnCommDestroy");
  cudaStreamDestroy(stream);
  return 0;
}
