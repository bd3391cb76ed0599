// SPDX-License-Identifier: BSD-3-Clause
// A latency probe of the proxy path with both ranks in this process on GPU 0
// (not a ctest test): the proxy's own measurement (test_wire_proxy_gpu) needs
// a GPU per process, this one runs where one GPU is lent, to compare two
// builds in one call. Both ranks share the GPU, so the figures are not the
// two-GPU ones; only their difference between builds means something.
// bf16 sum over shm, 8 KB to 256 KB (LL to 128 KB, flags above): us per
// all-reduce in CUDA graphs of 20 calls, each rank's graph on its own stream,
// median over 100 replays of the slower rank. Usage: proxy_latency_local
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "p2p_build.h"
#include "support/gpu.h"
#include "transport/transport.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2, kCallsPerGraph = 20, kReplays = 100;
constexpr size_t kMaxBytes = 256 * 1024;

#define CK(call) RETURN_ON_CUDA_ERROR(call, 1)

struct Rank {
  FastPath* path = nullptr;
  cudaStream_t stream = nullptr;
  void* buffer = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<cudaEvent_t> marks;
};

int capture(Rank& r, size_t count) {
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCallsPerGraph; ++i) r.path->allReduce(r.buffer, r.buffer, count, rcnBfloat16, rcnSum, r.stream);
  CK(cudaStreamEndCapture(r.stream, &graph));
  CK(cudaGraphInstantiate(&r.exec, graph, 0));
  CK(cudaGraphDestroy(graph));
  return 0;
}

// Median over replays of the slower rank's time per call, in us.
int timeSize(std::vector<Rank>& ranks, size_t bytes, double* us) {
  for (Rank& r : ranks)
    if (capture(r, bytes / 2)) return 1;
  for (int warm = 0; warm < 10; ++warm)
    for (Rank& r : ranks) CK(cudaGraphLaunch(r.exec, r.stream));
  for (Rank& r : ranks) CK(cudaStreamSynchronize(r.stream));
  for (Rank& r : ranks) CK(cudaEventRecord(r.marks[0], r.stream));
  for (int i = 0; i < kReplays; ++i)
    for (Rank& r : ranks) {
      CK(cudaGraphLaunch(r.exec, r.stream));
      CK(cudaEventRecord(r.marks[i + 1], r.stream));
    }
  std::vector<double> perReplay(kReplays, 0);
  for (Rank& r : ranks) {
    CK(cudaEventSynchronize(r.marks[kReplays]));
    for (int i = 0; i < kReplays; ++i) {
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, r.marks[i], r.marks[i + 1]));
      perReplay[i] = std::max(perReplay[i], ms * 1000.0 / kCallsPerGraph);
    }
    CK(cudaGraphExecDestroy(r.exec));
  }
  std::nth_element(perReplay.begin(), perReplay.begin() + kReplays / 2, perReplay.end());
  *us = perReplay[kReplays / 2];
  return 0;
}

}  // namespace

int main() {
  setenv("ROCENANTE_WIRE", "shm", 1);
  P2pOptions options;
  options.create = createProxyPath;
  options.oneGpu = true;
  options.maxBytes = kMaxBytes;
  std::vector<std::unique_ptr<FastPath>> paths;
  std::string why;
  if (!buildP2pPathsInProcess(kRanks, options, &paths, &why)) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  CK(cudaSetDevice(0));
  std::vector<Rank> ranks(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    ranks[r].path = paths[r].get();
    CK(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&ranks[r].buffer, kMaxBytes));
    CK(cudaMemset(ranks[r].buffer, 0, kMaxBytes));
    ranks[r].marks.resize(kReplays + 1);
    for (cudaEvent_t& e : ranks[r].marks) CK(cudaEventCreate(&e));
  }
  std::printf("%s, 2 ranks on GPU 0: bf16 sum, us per all-reduce (graphs of %d, median of %d replays)\n",
              paths[0]->transportName(), kCallsPerGraph, kReplays);
  for (size_t kb : {8, 16, 32, 48, 64, 128, 256}) {
    double us = 0;
    if (timeSize(ranks, kb * 1024, &us)) return 1;
    std::printf("%4zu KB %8.2f\n", kb, us);
  }
  for (int r = 0; r < kRanks; ++r) {
    if (paths[r]->asyncError(&why) != rcnSuccess) {
      std::fprintf(stderr, "rank %d: %s\n", r, why.c_str());
      return 1;
    }
  }
  return 0;
}
