// SPDX-License-Identifier: BSD-3-Clause
// The smallest complete use of the rcn API: one process per GPU, one
// all-reduce, check the result, clean up.
//   ./minimal_allreduce            (uses every GPU of the host)
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "rocenante/rocenante.h"

#define CHECK_RCN(call)                                                                   \
  do {                                                                                    \
    rcnResult_t r_ = (call);                                                              \
    if (r_ != rcnSuccess) {                                                               \
      std::fprintf(stderr, "%s failed: %s\n", #call, rcnGetErrorString(r_));              \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)
#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));             \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

// Rank `rank` of `nranks`: every rank contributes (rank + 1) in each element,
// so every element of the sum is nranks * (nranks + 1) / 2.
static int runRank(int rank, int nranks, const rcnUniqueId& id) {
  const size_t count = 4096;
  CHECK_CUDA(cudaSetDevice(rank));
  rcnComm_t comm;
  CHECK_RCN(rcnCommInitRank(&comm, nranks, id, rank));

  std::vector<float> host(count, float(rank + 1));
  float* buffer;
  cudaStream_t stream;
  CHECK_CUDA(cudaMalloc(&buffer, count * sizeof(float)));
  CHECK_CUDA(cudaStreamCreate(&stream));
  CHECK_CUDA(cudaMemcpy(buffer, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));

  CHECK_RCN(rcnAllReduce(buffer, buffer, count, rcnFloat32, rcnSum, comm, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));

  CHECK_CUDA(cudaMemcpy(host.data(), buffer, count * sizeof(float), cudaMemcpyDeviceToHost));
  const float expected = nranks * (nranks + 1) / 2.0f;
  int wrong = 0;
  for (float v : host) wrong += v != expected;
  std::printf("rank %d: %s (%zu floats, expected %.0f)\n", rank, wrong ? "WRONG" : "ok", count, expected);

  CHECK_RCN(rcnCommDestroy(comm));
  CHECK_CUDA(cudaFree(buffer));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return wrong ? 1 : 0;
}

int main() {
  // Count GPUs in a child: CUDA must not be initialised before fork().
  int nranks = 0;
  pid_t counter = fork();
  if (counter == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess ? n : 0);
  }
  int status = 0;
  waitpid(counter, &status, 0);
  nranks = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  if (nranks < 1) {
    std::fprintf(stderr, "no GPU found\n");
    return 1;
  }

  // One id, made once and shared by every rank (here through fork).
  rcnUniqueId id;
  CHECK_RCN(rcnGetUniqueId(&id));
  std::vector<pid_t> children;
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) _exit(runRank(rank, nranks, id));
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::printf("%s on %d GPU(s)\n", failed ? "FAILED" : "PASSED", nranks);
  return failed ? 1 : 0;
}
