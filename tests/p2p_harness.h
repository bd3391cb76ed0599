// SPDX-License-Identifier: BSD-3-Clause
// What the p2p GPU tests share: batches of all-reduce calls run on every rank
// this process drives (all of them, or one per forked process), eagerly or
// captured in a CUDA graph, each checked against the CPU reference, for
// untouched poison around the output, and bit-compared across ranks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn {
class Bootstrap;
}

// In a forked rank's body (an int function with `rank` in scope): when cond
// is false, prints "rank R: file:line: " and the message, and returns 1.
#define CHILD_CHECK(cond, ...)                                            \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                  \
      std::fprintf(stderr, "\n");                                         \
      return 1;                                                           \
    }                                                                     \
  } while (0)

namespace rcn::test {

// One rank's way to run an all-reduce on one of its communicators.
using AllReduceFn = std::function<rcnResult_t(const void* send, void* recv, size_t count,
                                              rcnDataType_t dtype, rcnRedOp_t op, cudaStream_t stream)>;

// rcnAllReduce on comm, as an AllReduceFn.
AllReduceFn commFn(rcnComm_t comm);

struct Call {
  rcnDataType_t dtype = rcnFloat32;
  rcnRedOp_t op = rcnSum;
  size_t count = 1;
  int sendOffset = 0;  // in elements: 1 makes the pointer unaligned to 16 bytes
  int recvOffset = 0;
  bool inPlace = false;
  int comm = 0;        // which of the rank's communicators runs it
};

// The ranks this process drives.
struct LocalRank {
  int rank = 0;
  int device = 0;
  cudaStream_t stream = nullptr;
  std::vector<AllReduceFn> comms;
  char* send = nullptr;  // kMaxCalls slots of slotBytes each
  char* recv = nullptr;
};

class BatchRunner {
 public:
  static constexpr int kMaxCalls = 16;

  // exchange: given this process's hashes (one per call, per local rank, in
  // locals order), returns every rank's, rank-major. Identity when the process
  // drives every rank.
  using Exchange = std::function<bool(const std::vector<uint64_t>& local, std::vector<uint64_t>* all)>;

  BatchRunner(int nranks, size_t maxBytes, std::vector<LocalRank> locals, Exchange exchange);
  ~BatchRunner();

  // Allocates the buffers and streams; false (with why) on a CUDA error.
  bool setUp(std::string* why);

  // Runs the calls back to back on each rank's stream (or captured once into
  // a graph and replayed `replays` times with fresh inputs) and checks them.
  // seed varies the inputs; every rank must pass the same calls and seed.
  bool run(const std::vector<Call>& calls, uint64_t seed, bool graph, int replays, std::string* why);

 private:
  bool prepare(const std::vector<Call>& calls, uint64_t seed, std::vector<std::vector<std::vector<char>>>* inputs,
               std::string* why);
  bool launchAll(const std::vector<Call>& calls, std::string* why);
  bool launchGraphs(const std::vector<cudaGraphExec_t>& graphs, std::string* why);
  bool check(const std::vector<Call>& calls, const std::vector<std::vector<std::vector<char>>>& inputs,
             std::string* why);

  int nranks_;
  size_t maxBytes_;
  size_t slotBytes_;
  std::vector<LocalRank> locals_;
  Exchange exchange_;
};

// The exchange of a process that drives one rank of nranks: every rank's
// hashes gathered through the test's own bootstrap.
BatchRunner::Exchange exchangeViaBootstrap(Bootstrap* bootstrap, int rank, int nranks);

// Calls covering every dtype x op, some unaligned, some in place, spread over
// `comms` communicators; counts are random from 1 element up to maxBytes.
std::vector<Call> everyTypeAndOp(uint64_t seed, size_t maxBytes, int comms);

// Runs calls in batches of BatchRunner::kMaxCalls; eager, or as graphs.
bool runInBatches(BatchRunner& runner, const std::vector<Call>& calls, uint64_t seed, bool graph,
                  std::string* why);

// "file:line: CUDA error text" when err is not cudaSuccess.
bool cudaOk(cudaError_t err, const char* what, std::string* why);

}  // namespace rcn::test
