// SPDX-License-Identifier: BSD-3-Clause
// A quick latency probe of the p2p one-shot kernel (not a ctest test; the
// full benchmark is bench/allreduce_sweep). One process per GPU, bf16 sum,
// 1 KB..256 KB: microseconds per all-reduce in CUDA graphs (20 calls per
// graph) and eagerly, for each protocol, block limit and launch mode. Prints
// a table on rank 0. Usage: p2p_latency [nranks]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "p2p_build.h"
#include "support/gpu.h"
#include "support/multiproc.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kCallsPerGraph = 20;
constexpr int kReplays = 20;
constexpr int kRepeats = 7;
constexpr size_t kMaxBytes = 256 * 1024;

struct Config {
  const char* name;
  const char* llMaxBytes;
  int maxBlocks;
  const char* pdl;
};
const Config kConfigs[] = {
    {"LL/32", "262144", 32, "0"},     {"LL/64", "262144", 64, "0"},   {"LL/128", "262144", 128, "0"},
    {"flags/32", "0", 32, "0"},       {"flags/128", "0", 128, "0"},   {"LL/64+pdl", "262144", 64, "1"},
    {"flags/128+pdl", "0", 128, "1"},
};
const size_t kSizes[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
constexpr int kNumSizes = sizeof(kSizes) / sizeof(kSizes[0]);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#define CK(call) RETURN_ON_CUDA_ERROR(call, 1)

// Microseconds per call: graph of kCallsPerGraph, replayed kReplays times.
int timeGraph(Bootstrap* boot, FastPath* path, void* send, void* recv, size_t count,
              cudaStream_t stream, double* us) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCallsPerGraph; ++i) path->allReduce(send, recv, count, rcnBfloat16, rcnSum, stream);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaGraphLaunch(exec, stream));  // warm up
  CK(cudaStreamSynchronize(stream));
  std::vector<double> samples;
  for (int rep = 0; rep < kRepeats; ++rep) {
    boot->barrier();
    CK(cudaEventRecord(a, stream));
    for (int i = 0; i < kReplays; ++i) CK(cudaGraphLaunch(exec, stream));
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    samples.push_back(ms * 1000.0 / (kReplays * kCallsPerGraph));
  }
  *us = median(samples);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 0;
}

int timeEager(Bootstrap* boot, FastPath* path, void* send, void* recv, size_t count,
              cudaStream_t stream, double* us) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const int calls = 200;
  std::vector<double> samples;
  for (int rep = 0; rep < kRepeats; ++rep) {
    boot->barrier();
    CK(cudaEventRecord(a, stream));
    for (int i = 0; i < calls; ++i) path->allReduce(send, recv, count, rcnBfloat16, rcnSum, stream);
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    samples.push_back(ms * 1000.0 / calls);
  }
  *us = median(samples);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 0;
}

int rankMain(const rcnUniqueId& id, int rank, int nranks) {
  std::unique_ptr<Bootstrap> boot;
  if (bootstrapInitTcp(id, rank, nranks, &boot) != rcnSuccess) return 1;
  CK(cudaSetDevice(rank));
  void *send = nullptr, *recv = nullptr;
  CK(cudaMalloc(&send, kMaxBytes));
  CK(cudaMalloc(&recv, kMaxBytes));
  CK(cudaMemset(send, 0, kMaxBytes));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // results[config][size][graph/eager]
  std::vector<double> results(kNumConfigs * kNumSizes * 2, 0);
  for (int c = 0; c < kNumConfigs; ++c) {
    P2pOptions options;
    options.maxBytes = kMaxBytes;
    options.maxBlocks = kConfigs[c].maxBlocks;
    options.llMaxBytes = kConfigs[c].llMaxBytes;
    options.pdl = kConfigs[c].pdl;
    std::unique_ptr<FastPath> path;
    std::string why;
    if (!buildP2pPath(boot.get(), rank, nranks, rank, options, &path, &why)) {
      std::fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
      return 1;
    }
    if (c == 0 && rank == 0) std::printf("transport: %s\n", path->transportName());
    for (int s = 0; s < kNumSizes; ++s) {
      const size_t count = kSizes[s] / 2;
      double* r = &results[(c * kNumSizes + s) * 2];
      if (timeGraph(boot.get(), path.get(), send, recv, count, stream, &r[0])) return 1;
      if (timeEager(boot.get(), path.get(), send, recv, count, stream, &r[1])) return 1;
    }
    std::string err;
    if (path->asyncError(&err) != rcnSuccess) {
      std::fprintf(stderr, "rank %d: %s\n", rank, err.c_str());
      return 1;
    }
    boot->barrier();
  }
  if (rank == 0) {
    std::printf("bf16 sum, %d ranks, us per all-reduce (median of %d; graph: %d calls x %d replays)\n", nranks,
                kRepeats, kCallsPerGraph, kReplays);
    std::printf("%8s", "bytes");
    for (const Config& c : kConfigs) std::printf(" %13s-g %13s-e", c.name, c.name);
    std::printf("\n");
    for (int s = 0; s < kNumSizes; ++s) {
      std::printf("%8zu", kSizes[s]);
      for (int c = 0; c < kNumConfigs; ++c)
        std::printf(" %15.2f %15.2f", results[(c * kNumSizes + s) * 2], results[(c * kNumSizes + s) * 2 + 1]);
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  boot->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int nranks = argc > 1 ? std::atoi(argv[1]) : 2;
  exitUnlessGpus(nranks);
  rcnUniqueId id;
  if (bootstrapGetUniqueId(&id) != rcnSuccess) return 1;
  auto outcomes = runRanks(nranks, [&](int rank) { return rankMain(id, rank, nranks); }, 300);
  std::string report;
  if (!allSucceeded(outcomes, &report)) {
    std::fprintf(stderr, "%s\n", report.c_str());
    return 1;
  }
  return 0;
}
