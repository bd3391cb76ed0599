// SPDX-License-Identifier: BSD-3-Clause
// The device API (rocenante/device.cuh) over the p2p path, every GPU of this
// process one rank (rcnCommInitAll): sums put by one kernel and gathered by
// the next, against a CPU reference in rank order (bit-exact: the same fp32
// additions), on grids that change from call to call, with rcnAllReduce calls
// between and in a CUDA graph; a peer that never puts; and the paths that
// have no device API. Under ROCENANTE_TEST_SHARE_GPUS on one GPU both ranks
// share it, without NCCL (ROCENANTE_NATIVE_NCCL=0).
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rocenante/device.cuh"
#include "rocenante/rocenante.h"
#include "support/gpu_case.h"
#include "support/reference.h"
#include "support/timeout_scale.h"

using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kValues = 3 * 4096 + 8;  // not a multiple of any grid's threads

__global__ void putKernel(rcnDeviceComm dev, const float* in, size_t count) {
  const uint32_t call = rcn_device::rcnDeviceCall(dev);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    rcn_device::rcnDevicePut(dev, call, i, in[i]);
}

// out[i] = the sum of index i, groups of 4 gathered kGroups at a time (the
// last batch of a thread partial); *failures counts gathers that failed.
template <int kGroups>
__global__ void gatherKernel(rcnDeviceComm dev, float* out, size_t count, unsigned* failures) {
  const uint32_t call = rcn_device::rcnDeviceCall(dev);
  const size_t groups = (count + 3) / 4, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t g0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g0 < groups; g0 += kGroups * stride) {
    size_t index[kGroups];
    float4 sums[kGroups];
    int valid = 0;
    for (int k = 0; k < kGroups && g0 + k * stride < groups; ++k) index[valid++] = 4 * (g0 + k * stride);
    if (!rcn_device::rcnDeviceGather4<kGroups>(dev, call, index, sums, valid)) {
      atomicAdd(failures, 1u);
      continue;
    }
    for (int k = 0; k < valid; ++k) {
      const float v[4] = {sums[k].x, sums[k].y, sums[k].z, sums[k].w};
      for (int e = 0; e < 4 && index[k] + e < count; ++e) out[index[k] + e] = v[e];
    }
  }
  __syncthreads();
  rcn_device::rcnDeviceEndCall(dev, call);
}

// out[r * count + i] = what rank r put at index i (an all-gather): every
// rank's slice read with rcnDeviceGatherFrom4, two groups at a time.
__global__ void gatherFromKernel(rcnDeviceComm dev, float* out, size_t count, unsigned* failures) {
  const uint32_t call = rcn_device::rcnDeviceCall(dev);
  const size_t groups = (count + 3) / 4, stride = size_t(gridDim.x) * blockDim.x;
  for (int r = 0; r < dev.nranks; ++r)
    for (size_t g0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g0 < groups; g0 += 2 * stride) {
      size_t index[2];
      float4 values[2];
      int valid = 0;
      for (int k = 0; k < 2 && g0 + k * stride < groups; ++k) index[valid++] = 4 * (g0 + k * stride);
      if (!rcn_device::rcnDeviceGatherFrom4<2>(dev, call, r, index, values, valid)) {
        atomicAdd(failures, 1u);
        continue;
      }
      for (int k = 0; k < valid; ++k) {
        const float v[4] = {values[k].x, values[k].y, values[k].z, values[k].w};
        for (int e = 0; e < 4 && index[k] + e < count; ++e) out[r * count + index[k] + e] = v[e];
      }
    }
  __syncthreads();
  rcn_device::rcnDeviceEndCall(dev, call);
}

// ---- back to back: no host sync between calls, PDL launches, skewed ranks

// Small integers, so any order of addition gives the same bits.
__host__ __device__ inline float stressValue(int rank, int call, size_t i) {
  return float((rank + 1) * 3 + call % 29 + int(i % 7));
}

// Puts this rank's values of call `iter`, after delayNs (a slow rank).
__global__ void stressPut(rcnDeviceComm dev, int iter, size_t count, unsigned delayNs) {
  rcn_device::rcnDeviceWaitForPreviousKernels();
  rcn_device::rcnDeviceLetNextKernelIn();  // a put never waits
  if (delayNs) {
    const long long until = clock64() + delayNs * 2ll;  // ~2 cycles a ns
    while (clock64() < until) {
    }
  }
  const uint32_t call = rcn_device::rcnDeviceCall(dev);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    rcn_device::rcnDevicePut(dev, call, i, stressValue(dev.rank, iter, i));
}

// Counts sums that differ from every rank's stressValue added in rank order.
__global__ void stressGather(rcnDeviceComm dev, int iter, size_t count, unsigned* wrong, unsigned* failures) {
  rcn_device::rcnDeviceWaitForPreviousKernels();
  const uint32_t call = rcn_device::rcnDeviceCall(dev);
  const size_t groups = count / 4, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t g0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g0 < groups; g0 += 4 * stride) {
    size_t index[4];
    float4 sums[4];
    int valid = 0;
    for (int k = 0; k < 4 && g0 + k * stride < groups; ++k) index[valid++] = 4 * (g0 + k * stride);
    if (!rcn_device::rcnDeviceGather4<4>(dev, call, index, sums, valid)) {
      atomicAdd(failures, 1u);
      continue;
    }
    for (int k = 0; k < valid; ++k) {
      const float got[4] = {sums[k].x, sums[k].y, sums[k].z, sums[k].w};
      for (int e = 0; e < 4; ++e) {
        float want = 0;
        for (int r = 0; r < dev.nranks; ++r) want = r == 0 ? stressValue(r, iter, index[k] + e) : want + stressValue(r, iter, index[k] + e);
        if (got[e] != want) atomicAdd(wrong, 1u);
      }
    }
  }
  __syncthreads();
  rcn_device::rcnDeviceEndCall(dev, call);
  rcn_device::rcnDeviceLetNextKernelIn();  // as device.cuh asks: after the block's last gather
}

template <typename... Args>
cudaError_t launchPdl(void (*kernel)(Args...), int blocks, int threads, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

struct Rank {
  rcnComm_t comm = nullptr;
  rcnDeviceComm dev{};
  cudaStream_t stream = nullptr;
  float* in = nullptr;
  float* out = nullptr;
  float* scratch = nullptr;  // an rcnAllReduce between device calls
  unsigned* failures = nullptr;
};

// Rank r on rankDevice(r): its own GPU, or, with ROCENANTE_TEST_SHARE_GPUS on
// fewer GPUs, a shared one, and then without NCCL (NativeNcclUnlessShared).
void initAll(rcnComm_t (&comms)[kRanks]) {
  int devices[kRanks];
  for (int r = 0; r < kRanks; ++r) devices[r] = rankDevice(r);
  NativeNcclUnlessShared ncclRule(kRanks);
  REQUIRE(rcnCommInitAll(comms, kRanks, devices) == rcnSuccess);
}

// Loads the test's kernels on every rank's GPU before any call. CUDA loads a
// kernel at its first launch, and the load waits for the kernels running on
// the GPU: where two ranks share one, for the peer's kernel, which is waiting
// for this rank (DEVICE_API.md says the same to users).
void preloadKernels() {
  const void* kernels[] = {
      reinterpret_cast<const void*>(putKernel),       reinterpret_cast<const void*>(gatherKernel<1>),
      reinterpret_cast<const void*>(gatherKernel<4>), reinterpret_cast<const void*>(stressPut),
      reinterpret_cast<const void*>(stressGather),    reinterpret_cast<const void*>(gatherFromKernel)};
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    for (const void* kernel : kernels) {
      cudaFuncAttributes attributes;
      REQUIRE(cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess);
    }
  }
}

void setUp(std::vector<Rank>& ranks) {
  rcnComm_t comms[kRanks] = {};
  initAll(comms);
  preloadKernels();
  for (int r = 0; r < kRanks; ++r) {
    Rank& k = ranks[r];
    k.comm = comms[r];
    REQUIRE(rcnCommGetDeviceComm(k.comm, &k.dev) == rcnSuccess);
    REQUIRE(k.dev.rank == r);
    REQUIRE(k.dev.nranks == kRanks);
    REQUIRE(k.dev.maxValues >= kValues);
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaMalloc(&k.in, kValues * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMalloc(&k.out, kRanks * kValues * sizeof(float)) == cudaSuccess);  // an all-gather's output
    REQUIRE(cudaMalloc(&k.scratch, 1024 * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMalloc(&k.failures, sizeof(unsigned)) == cudaSuccess);
    REQUIRE(cudaMemset(k.failures, 0, sizeof(unsigned)) == cudaSuccess);
  }
}

void tearDown(std::vector<Rank>& ranks) {
  for (int r = 0; r < kRanks; ++r) {
    Rank& k = ranks[r];
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(k.stream) == cudaSuccess);
    cudaFree(k.in), cudaFree(k.out), cudaFree(k.scratch), cudaFree(k.failures);
    cudaStreamDestroy(k.stream);
    REQUIRE(rcnCommDestroy(k.comm) == rcnSuccess);
  }
}

// Fresh random inputs on every rank, outputs poisoned with NaN; returns the
// CPU reference: the ranks' values added in rank order, in fp32.
std::vector<float> freshInputs(std::vector<Rank>& ranks, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> want(kValues, 0.0f), values(kValues), poison(kValues, std::nanf(""));
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < kValues; ++i) values[i] = normal(rng);
    for (size_t i = 0; i < kValues; ++i) want[i] = r == 0 ? values[i] : want[i] + values[i];
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    REQUIRE(copyToDevice(ranks[r].in, values.data(), kValues * sizeof(float)) == cudaSuccess);
    REQUIRE(copyToDevice(ranks[r].out, poison.data(), kValues * sizeof(float)) == cudaSuccess);
  }
  return want;
}

// One device call on every rank: the put kernel, an rcnAllReduce, the gather
// kernel, each grid its own size.
void enqueueCall(std::vector<Rank>& ranks, int putBlocks, int gatherBlocks) {
  for (int r = 0; r < kRanks; ++r) {
    Rank& k = ranks[r];
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    putKernel<<<putBlocks, 128, 0, k.stream>>>(k.dev, k.in, kValues);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    REQUIRE(rcnAllReduce(k.scratch, k.scratch, 1024, rcnFloat32, rcnSum, k.comm, k.stream) == rcnSuccess);
    if (gatherBlocks % 2) gatherKernel<1><<<gatherBlocks, 256, 0, k.stream>>>(k.dev, k.out, kValues, k.failures);
    else gatherKernel<4><<<gatherBlocks, 256, 0, k.stream>>>(k.dev, k.out, kValues, k.failures);
    REQUIRE(cudaGetLastError() == cudaSuccess);
  }
}

// Every rank's output equals `want` bit for bit; no gather failed.
void checkOutputs(std::vector<Rank>& ranks, const std::vector<float>& want, int call) {
  std::vector<float> got(kValues);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(ranks[r].stream) == cudaSuccess);
    REQUIRE(cudaMemcpy(got.data(), ranks[r].out, kValues * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    unsigned failures = 0;
    REQUIRE(cudaMemcpy(&failures, ranks[r].failures, sizeof failures, cudaMemcpyDeviceToHost) == cudaSuccess);
    INFO("call " << call << ", rank " << r);
    REQUIRE(failures == 0);
    size_t wrong = 0, first = kValues;
    for (size_t i = 0; i < kValues; ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
        if (first == kValues) first = i;
        ++wrong;
      }
    }
    INFO("first wrong element " << first << ": " << (first < kValues ? got[first] : 0.f) << " against "
                                << (first < kValues ? want[first] : 0.f));
    REQUIRE(wrong == 0);
  }
}

void forceP2p() {
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  setenv("ROCENANTE_TRANSPORT", "p2p", 1);
}

void unforce() {
  unsetenv("ROCENANTE_FORCE");
  unsetenv("ROCENANTE_TRANSPORT");
}

}  // namespace

TEST_CASE("Device puts and gathers sum in rank order, the same bits on every rank", "[device][p2p][gpu][api]") {
  requireGpus(kRanks);
  forceP2p();
  std::vector<Rank> ranks(kRanks);
  setUp(ranks);
  std::mt19937 rng(7);
  // Grids change between calls (and between the two kernels of a call), so
  // the call numbers must advance for every block slot whatever the grid.
  const int grids[][2] = {{1, 1}, {7, 3}, {132, 5}, {2, 264}, {1056, 1}, {5, 7}, {3, 2}};
  int call = 0;
  for (int round = 0; round < 3; ++round) {
    for (const auto& grid : grids) {
      const std::vector<float> want = freshInputs(ranks, rng);
      enqueueCall(ranks, grid[0], grid[1]);
      checkOutputs(ranks, want, call++);
    }
  }
  // Captured once per rank, replayed with fresh inputs each time: the call
  // numbers live in device memory, so replays stay in step.
  std::vector<cudaGraphExec_t> execs(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    Rank& k = ranks[r];
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(k.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    putKernel<<<11, 128, 0, k.stream>>>(k.dev, k.in, kValues);
    REQUIRE(rcnAllReduce(k.scratch, k.scratch, 1024, rcnFloat32, rcnSum, k.comm, k.stream) == rcnSuccess);
    gatherKernel<4><<<9, 256, 0, k.stream>>>(k.dev, k.out, kValues, k.failures);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(k.stream, &graph) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&execs[r], graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  }
  for (int replay = 0; replay < 20; ++replay) {
    const std::vector<float> want = freshInputs(ranks, rng);
    for (int r = 0; r < kRanks; ++r) {
      REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
      REQUIRE(cudaGraphLaunch(execs[r], ranks[r].stream) == cudaSuccess);
    }
    checkOutputs(ranks, want, call++);
  }
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    REQUIRE(cudaGraphExecDestroy(execs[r]) == cudaSuccess);
    rcnResult_t async = rcnInternalError;
    REQUIRE(rcnCommGetAsyncError(ranks[r].comm, &async) == rcnSuccess);
    REQUIRE(async == rcnSuccess);
  }
  tearDown(ranks);
  unforce();
}

// The all-gather of the device API: every rank puts its slice at indices of
// its own part, the consumer reads every rank's; each rank's output is every
// rank's input in rank order, exactly, call after call (with rcnAllReduce
// calls and sum gathers between, so the call numbers stay in step).
TEST_CASE("Device puts and per-rank gathers make an all-gather, exact on every rank", "[device][p2p][gpu][api]") {
  requireGpus(kRanks);
  forceP2p();
  std::vector<Rank> ranks(kRanks);
  setUp(ranks);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int grids[][2] = {{1, 1}, {7, 3}, {132, 5}, {3, 64}};
  for (int round = 0; round < 2; ++round) {
    for (const auto& grid : grids) {
      std::vector<float> want(kRanks * kValues), poison(kRanks * kValues, std::nanf(""));
      for (int r = 0; r < kRanks; ++r) {
        for (size_t i = 0; i < kValues; ++i) want[r * kValues + i] = normal(rng);
        Rank& k = ranks[r];
        REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
        REQUIRE(copyToDevice(k.in, want.data() + r * kValues, kValues * sizeof(float)) == cudaSuccess);
        REQUIRE(copyToDevice(k.out, poison.data(), poison.size() * sizeof(float)) == cudaSuccess);
      }
      for (int r = 0; r < kRanks; ++r) {
        Rank& k = ranks[r];
        REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
        putKernel<<<grid[0], 128, 0, k.stream>>>(k.dev, k.in, kValues);
        REQUIRE(rcnAllReduce(k.scratch, k.scratch, 1024, rcnFloat32, rcnSum, k.comm, k.stream) == rcnSuccess);
        gatherFromKernel<<<grid[1], 256, 0, k.stream>>>(k.dev, k.out, kValues, k.failures);
        REQUIRE(cudaGetLastError() == cudaSuccess);
      }
      std::vector<float> got(kRanks * kValues);
      for (int r = 0; r < kRanks; ++r) {
        REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(ranks[r].stream) == cudaSuccess);
        REQUIRE(cudaMemcpy(got.data(), ranks[r].out, got.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
                cudaSuccess);
        unsigned failures = 0;
        REQUIRE(cudaMemcpy(&failures, ranks[r].failures, sizeof failures, cudaMemcpyDeviceToHost) == cudaSuccess);
        INFO("rank " << r << ", grid " << grid[0] << "/" << grid[1]);
        REQUIRE(failures == 0);
        REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      }
    }
    // A sum call between rounds: both kinds of consumer share the call numbers.
    const std::vector<float> want = freshInputs(ranks, rng);
    enqueueCall(ranks, 4, 4);
    checkOutputs(ranks, want, round);
  }
  tearDown(ranks);
  unforce();
}

// Thousands of calls with no host sync: a producer of call k + 2 must not
// overwrite values a slower peer's consumer of call k still reads, and the
// call numbers must stay in step whatever the grids and the skew.
TEST_CASE("Device calls back to back, PDL-launched, with skewed ranks", "[device][p2p][gpu][api]") {
  requireGpus(kRanks);
  forceP2p();
  std::vector<Rank> ranks(kRanks);
  setUp(ranks);
  std::vector<unsigned*> wrong(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    REQUIRE(cudaMalloc(&wrong[r], sizeof(unsigned)) == cudaSuccess);
    REQUIRE(cudaMemset(wrong[r], 0, sizeof(unsigned)) == cudaSuccess);
  }
  constexpr int kCalls = 3000;
  for (int iter = 0; iter < kCalls; ++iter) {
    for (int r = 0; r < kRanks; ++r) {
      Rank& k = ranks[r];
      REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
      const unsigned delayNs = (iter + r) % 3 == 0 ? 3000u : 0u;  // each rank late on some calls
      REQUIRE(launchPdl(stressPut, 1 + (iter * 7 + r) % 40, 128, k.stream, k.dev, iter, kValues, delayNs) ==
              cudaSuccess);
      if (iter % 100 == 50)
        REQUIRE(rcnAllReduce(k.scratch, k.scratch, 1024, rcnFloat32, rcnSum, k.comm, k.stream) == rcnSuccess);
      REQUIRE(launchPdl(stressGather, 1 + (iter * 5 + r) % 33, 256, k.stream, k.dev, iter, kValues, wrong[r],
                        k.failures) == cudaSuccess);
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaSetDevice(rankDevice(r)) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(ranks[r].stream) == cudaSuccess);
    unsigned bad = 0, failures = 0;
    REQUIRE(cudaMemcpy(&bad, wrong[r], sizeof bad, cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(cudaMemcpy(&failures, ranks[r].failures, sizeof failures, cudaMemcpyDeviceToHost) == cudaSuccess);
    INFO("rank " << r);
    CHECK(bad == 0);
    CHECK(failures == 0);
    uint32_t calls = 0;
    REQUIRE(cudaMemcpy(&calls, ranks[r].dev.calls, sizeof calls, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(calls == uint32_t(kCalls));
    cudaFree(wrong[r]);
  }
  tearDown(ranks);
  unforce();
}

// Rank 1 never puts: rank 0's gathers give up after ROCENANTE_TIMEOUT_MS,
// rcnCommGetAsyncError reports it, and later calls return without waiting.
TEST_CASE("A peer that never puts: the gather gives up within the timeout and says so", "[device][p2p][gpu][api]") {
  requireGpus(kRanks);
  forceP2p();
  std::vector<Rank> ranks(kRanks);
  {
    ScopedEnv shortWait("ROCENANTE_TIMEOUT_MS", scaledMsText(500).c_str());
    setUp(ranks);
  }
  Rank& k = ranks[0];
  REQUIRE(cudaSetDevice(rankDevice(0)) == cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  putKernel<<<4, 128, 0, k.stream>>>(k.dev, k.in, kValues);
  gatherKernel<4><<<4, 256, 0, k.stream>>>(k.dev, k.out, kValues, k.failures);
  REQUIRE(cudaStreamSynchronize(k.stream) == cudaSuccess);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds >= scaledSeconds(0.45));
  CHECK(seconds < scaledSeconds(5.0));
  unsigned failures = 0;
  REQUIRE(cudaMemcpy(&failures, k.failures, sizeof failures, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(failures > 0);
  rcnResult_t async = rcnSuccess;
  REQUIRE(rcnCommGetAsyncError(k.comm, &async) == rcnSuccess);
  CHECK(async == rcnRemoteError);
  CHECK(std::string(rcnGetLastError(k.comm)).find("peer 1 did not arrive") != std::string::npos);
  // The communicator stays failed: the next device call returns at once
  // instead of waiting again, and the next all-reduce returns the error
  // without launching.
  const auto again = std::chrono::steady_clock::now();
  putKernel<<<4, 128, 0, k.stream>>>(k.dev, k.in, kValues);
  gatherKernel<4><<<4, 256, 0, k.stream>>>(k.dev, k.out, kValues, k.failures);
  REQUIRE(rcnAllReduce(k.scratch, k.scratch, 1024, rcnFloat32, rcnSum, k.comm, k.stream) == rcnRemoteError);
  REQUIRE(cudaStreamSynchronize(k.stream) == cudaSuccess);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count() < scaledSeconds(0.2));
  tearDown(ranks);
  unforce();
}

// A put past the window fails the communicator (nothing lands in a
// neighbour's part), and the host is told which rule broke.
TEST_CASE("A put past maxValues fails the communicator and says why", "[device][p2p][gpu][api]") {
  requireGpus(kRanks);
  forceP2p();
  std::vector<Rank> ranks(kRanks);
  setUp(ranks);
  Rank& k = ranks[0];
  REQUIRE(cudaSetDevice(rankDevice(0)) == cudaSuccess);
  float* big = nullptr;
  const size_t count = k.dev.maxValues + 4;
  REQUIRE(cudaMalloc(&big, count * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemset(big, 0, count * sizeof(float)) == cudaSuccess);
  putKernel<<<4, 128, 0, k.stream>>>(k.dev, big, count);
  REQUIRE(cudaStreamSynchronize(k.stream) == cudaSuccess);
  rcnResult_t async = rcnSuccess;
  REQUIRE(rcnCommGetAsyncError(k.comm, &async) == rcnSuccess);
  CHECK(async == rcnInvalidUsage);  // this rank's misuse, not a missing peer
  CHECK(std::string(rcnGetLastError(k.comm)).find("broke its rules") != std::string::npos);
  rcnResult_t peerAsync = rcnInternalError;
  REQUIRE(rcnCommGetAsyncError(ranks[1].comm, &peerAsync) == rcnSuccess);
  CHECK(peerAsync == rcnSuccess);  // rank 1 did nothing
  cudaFree(big);
  tearDown(ranks);
  unforce();
}

TEST_CASE("rcnCommGetDeviceComm refuses a communicator without the p2p path", "[device][gpu][api]") {
  requireOwnGpus(kRanks);  // ROCENANTE_DISABLE needs NCCL
  rcnDeviceComm dev{};
  CHECK(rcnCommGetDeviceComm(nullptr, &dev) != rcnSuccess);
  setenv("ROCENANTE_DISABLE", "1", 1);
  rcnComm_t comms[kRanks] = {};
  REQUIRE(rcnCommInitAll(comms, kRanks, nullptr) == rcnSuccess);
  unsetenv("ROCENANTE_DISABLE");
  for (rcnComm_t c : comms) CHECK(rcnCommGetDeviceComm(c, &dev) == rcnInvalidUsage);
  CHECK(rcnCommGetDeviceComm(comms[0], nullptr) == rcnInvalidArgument);
  for (rcnComm_t c : comms) REQUIRE(rcnCommDestroy(c) == rcnSuccess);
}

TEST_CASE("rcnCommGetDeviceComm refuses a p2p communicator made without a window", "[device][p2p][gpu][api]") {
  requireGpus(kRanks);
  forceP2p();
  setenv("ROCENANTE_DEVICE_WINDOW_BYTES", "0", 1);
  rcnComm_t comms[kRanks] = {};
  initAll(comms);
  unsetenv("ROCENANTE_DEVICE_WINDOW_BYTES");
  rcnDeviceComm dev{};
  for (rcnComm_t c : comms) CHECK(rcnCommGetDeviceComm(c, &dev) == rcnInvalidUsage);
  for (rcnComm_t c : comms) REQUIRE(rcnCommDestroy(c) == rcnSuccess);
  unforce();
}
