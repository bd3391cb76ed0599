// SPDX-License-Identifier: BSD-3-Clause
#include "probe_comm.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "rocenante/rocenante.h"

namespace rcn::probe {
namespace {

constexpr size_t kCount = 1000;  // floats in the check all-reduce

// What rank 0 hands every rank: a unique id, or that it could not make one.
struct IdBlock {
  int32_t ok;
  rcnUniqueId id;
};

const char* pathName(rcnPath_t path) {
  switch (path) {
    case rcnPathP2p: return "p2p";
    case rcnPathProxy: return "proxy";
    case rcnPathHost: return "host";
    default: return "nccl";
  }
}

// Rank r contributes (r+1)*(i%7+1): small integers, exact in any order.
float contribution(int rank, size_t i) { return static_cast<float>((rank + 1) * (i % 7 + 1)); }
float expectedSum(int nranks, size_t i) {
  return static_cast<float>((i % 7 + 1) * (nranks * (nranks + 1) / 2));
}

// One float32 sum through comm: device buffers where it has a GPU, host
// buffers on the host backend. Poisoned output, checked exactly.
rcnResult_t checkedAllReduce(rcnComm_t comm, const rcnCommInfo& info, std::string* why) {
  std::vector<float> in(kCount), out(kCount, std::nanf(""));
  for (size_t i = 0; i < kCount; ++i) in[i] = contribution(info.rank, i);
  size_t bytes = kCount * sizeof(float);
  rcnResult_t res;
  if (info.cudaDev < 0) {
    res = rcnAllReduce(in.data(), out.data(), kCount, rcnFloat32, rcnSum, comm, nullptr);
  } else {
    void *send = nullptr, *recv = nullptr;
    RCN_CUDA_CHECK(cudaMalloc(&send, bytes));
    RCN_CUDA_CHECK(cudaMalloc(&recv, bytes));
    RCN_CUDA_CHECK(cudaMemcpy(send, in.data(), bytes, cudaMemcpyHostToDevice));
    RCN_CUDA_CHECK(cudaMemcpy(recv, out.data(), bytes, cudaMemcpyHostToDevice));
    res = rcnAllReduce(send, recv, kCount, rcnFloat32, rcnSum, comm, nullptr);
    if (res == rcnSuccess) RCN_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    if (res == rcnSuccess) RCN_CUDA_CHECK(cudaMemcpy(out.data(), recv, bytes, cudaMemcpyDeviceToHost));
    cudaFree(send);
    cudaFree(recv);
  }
  if (res != rcnSuccess) {
    *why = std::string("rcnAllReduce failed: ") + rcnGetErrorString(res) + ": " + rcnGetLastError(comm);
    return res;
  }
  for (size_t i = 0; i < kCount; ++i) {
    if (out[i] == expectedSum(info.nranks, i)) continue;
    *why = "element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " +
           std::to_string(expectedSum(info.nranks, i));
    return rcnInternalError;
  }
  return rcnSuccess;
}

// The library's message without its "rank R/N: " prefix (the probe's line
// already names the rank), so every rank's text can be compared.
std::string withoutRankPrefix(const std::string& text, int rank, int nranks) {
  std::string prefix = "rank " + std::to_string(rank) + "/" + std::to_string(nranks) + ": ";
  return text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : text;
}

}  // namespace

rcnResult_t tryComm(Bootstrap& boot, int rank, int nranks, int gpu, std::string* line) {
  std::string head = "rank " + std::to_string(rank) + "/" + std::to_string(nranks) + " comm: ";
  std::vector<IdBlock> ids(nranks);
  std::memset(ids.data(), 0, ids.size() * sizeof(IdBlock));
  if (rank == 0) ids[0].ok = rcnGetUniqueId(&ids[0].id) == rcnSuccess;
  RCN_CHECK(boot.allGather(ids.data(), sizeof(IdBlock)));
  if (!ids[0].ok) {
    *line = head + "init=failed (no unique id) reason: rank 0 could not make a unique id";
    return rcnSuccess;
  }
  if (gpu >= 0) RCN_CUDA_CHECK(cudaSetDevice(gpu));
  clearLastError();
  rcnComm_t comm = nullptr;
  rcnResult_t res = rcnCommInitRank(&comm, nranks, ids[0].id, rank);
  if (res != rcnSuccess) {
    *line = head + "init=failed (" + rcnGetErrorString(res) + ") reason: " +
            withoutRankPrefix(rcnGetLastError(nullptr), rank, nranks);
    return rcnSuccess;
  }
  rcnCommInfo info;
  RCN_CHECK(rcnCommQuery(comm, &info));
  std::string why;
  rcnResult_t reduced = checkedAllReduce(comm, info, &why);
  *line = head + "init=ok path=" + pathName(info.path) + " transport=" + info.transport +
          " selftest=" + (info.selfTestPassed ? "passed" : "no") +
          " allreduce=" + (reduced == rcnSuccess ? "ok" : "FAILED (" + why + ")") + " reason: " + info.reason;
  if (reduced != rcnSuccess) {
    rcnCommAbort(comm);
    return reduced;
  }
  RCN_CHECK(rcnCommDestroy(comm));
  return rcnSuccess;
}

}  // namespace rcn::probe
