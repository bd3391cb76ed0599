// SPDX-License-Identifier: BSD-3-Clause
// Soak on the p2p path (the GPU host): two forked ranks, two communicators,
// a long random run of batches, eager or captured in a CUDA graph and
// replayed, each call's count, type, op, alignment and in-place drawn from a
// plan every rank draws alike. The harness (p2p_harness.h) checks every
// result against the CPU reference, the poison around it, and every rank's
// bytes against the others'. Device memory, open descriptors and resident
// memory must stay flat from the first tenth of the run to its end. With two
// GPUs each communicator also has NCCL beside it, and counts past the fast
// path's limit go there, interleaved with the one-shot calls; with
// ROCENANTE_TEST_SHARE_GPUS=1 on one GPU there is no NCCL and every count
// fits the fast path.
//
// RCN_SOAK_CALLS sets the number of calls (default 100000).
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/dtype.h"
#include "p2p_harness.h"
#include "rocenante/rocenante.h"
#include "support/gpu_case.h"
#include "support/multiproc.h"
#include "support/process_usage.h"
#include "support/rank_checks.h"
#include "support/scoped_env.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kFastBytes = 256 * 1024;  // the fast path's limit (maxBytes) under ROCENANTE_MAX_BYTES
constexpr size_t kSlotBytes = 1 << 20;     // the harness's per-call buffers: NCCL calls up to 1 MB
constexpr long kMaxDeviceGrowthBytes = 64l << 20;
constexpr long kMaxRssGrowthBytes = 64l << 20;

long soakCalls() {
  const char* text = std::getenv("RCN_SOAK_CALLS");
  return text && std::atol(text) > 0 ? std::atol(text) : 100000;
}

long deviceUsedBytes() {
  size_t free = 0, total = 0;
  return cudaMemGetInfo(&free, &total) == cudaSuccess ? long(total - free) : 0;
}

// A batch of the plan: mostly decode-sized counts, some up to the fast
// path's limit, and (with NCCL) now and then past it.
std::vector<Call> drawBatch(std::mt19937_64& plan, bool withNccl) {
  std::vector<Call> calls(1 + plan() % BatchRunner::kMaxCalls);
  for (Call& c : calls) {
    c.dtype = rcnDataType_t(plan() % rcnNumTypes);
    c.op = rcnRedOp_t(plan() % rcnNumOps);
    const uint64_t kind = plan() % 100;
    const bool toNccl = withNccl && kind >= 97;
    if (toNccl) {  // what a model sends NCCL: its activations' types, summed (or max/min)
      const rcnDataType_t types[] = {rcnBfloat16, rcnFloat16, rcnFloat32};
      const rcnRedOp_t ops[] = {rcnSum, rcnMax, rcnMin};
      c.dtype = types[plan() % 3];
      c.op = ops[plan() % 3];
    }
    const size_t limit = toNccl ? kSlotBytes : kind < 80 ? 32 * 1024 : kFastBytes;
    c.count = 1 + plan() % (limit / dtypeSize(c.dtype) - 1);
    c.sendOffset = int(plan() % 2);
    c.recvOffset = int(plan() % 2);
    c.inPlace = plan() % 4 == 0;
    c.comm = int(plan() % 2);
  }
  return calls;
}

struct Baseline {
  int fds = -1;
  long rss = 0, device = 0;
};

int soakRank(const rcnUniqueId ids[2], const rcnUniqueId& testId, int rank, long calls) {
  CHILD_CHECK(cudaSetDevice(rankDevice(rank)) == cudaSuccess, "cudaSetDevice");
  std::unique_ptr<Bootstrap> exchange;  // the test's own channel, for output hashes
  CHILD_CHECK(bootstrapInitTcp(testId, rank, kRanks, &exchange) == rcnSuccess, "test bootstrap");
  rcnComm_t comms[2] = {nullptr, nullptr};
  for (int c = 0; c < 2; ++c)
    CHILD_CHECK(rcnCommInitRank(&comms[c], kRanks, ids[c], rank) == rcnSuccess, "init: %s", rcnGetLastError(nullptr));
  rcnCommInfo info{};
  CHILD_CHECK(rcnCommQuery(comms[0], &info) == rcnSuccess && info.path == rcnPathP2p, "path %s: %s", info.transport,
              info.reason);
  const bool withNccl = gpuCount() >= kRanks;
  std::vector<LocalRank> locals(1);
  locals[0].rank = rank;
  locals[0].device = rankDevice(rank);
  locals[0].comms = {commFn(comms[0]), commFn(comms[1])};
  Baseline warm;
  long done = 0, graphs = 0;
  const auto start = std::chrono::steady_clock::now();
  {
    // Slots only as large as the largest call: the harness copies and checks each slot whole.
    BatchRunner runner(kRanks, withNccl ? kSlotBytes : kFastBytes, locals,
                       exchangeViaBootstrap(exchange.get(), rank, kRanks));
    std::string why;
    CHILD_CHECK(runner.setUp(&why), "%s", why.c_str());
    std::mt19937_64 plan(20261204);  // the same batches on every rank
    for (uint64_t seed = 1; done < calls; ++seed) {
      if (warm.fds < 0 && done >= calls / 10) warm = Baseline{openDescriptors(), residentBytes(), deviceUsedBytes()};
      const std::vector<Call> batch = drawBatch(plan, withNccl);
      const bool graph = plan() % 4 == 0;
      const int replays = graph ? 1 + int(plan() % 3) : 1;
      CHILD_CHECK(runner.run(batch, seed, graph, replays, &why), "batch %llu (%s): %s",
                  static_cast<unsigned long long>(seed), graph ? "graph" : "eager", why.c_str());
      done += long(batch.size()) * replays;
      graphs += graph;
    }
  }
  for (rcnComm_t comm : comms) {
    rcnResult_t async = rcnInternalError;
    CHILD_CHECK(rcnCommGetAsyncError(comm, &async) == rcnSuccess && async == rcnSuccess, "async error");
  }
  // The runner's buffers are freed: what is left is the communicators'.
  const Baseline end{openDescriptors(), residentBytes(), deviceUsedBytes()};
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "rank %d: %ld calls (%ld graph batches) in %.0f s; descriptors %d -> %d, resident %.1f -> %.1f MB, device "
      "%.1f -> %.1f MB\n",
      rank, done, graphs, seconds, warm.fds, end.fds, warm.rss / 1e6, end.rss / 1e6, warm.device / 1e6,
      end.device / 1e6);
  CHILD_CHECK(end.fds <= warm.fds, "open descriptors went from %d to %d", warm.fds, end.fds);
  CHILD_CHECK(end.rss - warm.rss < kMaxRssGrowthBytes, "resident memory grew by %.1f MB", (end.rss - warm.rss) / 1e6);
  CHILD_CHECK(end.device - warm.device < kMaxDeviceGrowthBytes, "device memory grew by %.1f MB",
              (end.device - warm.device) / 1e6);
  CHILD_CHECK(exchange->barrier() == rcnSuccess, "barrier");
  for (rcnComm_t comm : comms) CHILD_CHECK(rcnCommDestroy(comm) == rcnSuccess, "destroy");
  return 0;
}

}  // namespace

TEST_CASE("soak: randomized all-reduces on the p2p path stay exact, identical and flat", "[p2p][gpu][soak]") {
  requireGpus(kRanks);
  NativeNcclUnlessShared ncclRule(kRanks);
  ScopedEnv force("ROCENANTE_FORCE", "rocenante"), transport("ROCENANTE_TRANSPORT", "p2p");
  ScopedEnv fast("ROCENANTE_MAX_BYTES", std::to_string(kFastBytes).c_str());
  rcnUniqueId ids[2], testId;
  REQUIRE(rcnGetUniqueId(&ids[0]) == rcnSuccess);
  REQUIRE(rcnGetUniqueId(&ids[1]) == rcnSuccess);
  REQUIRE(bootstrapGetUniqueId(&testId) == rcnSuccess);
  const long calls = soakCalls();
  checkRanks(runRanks(
      kRanks, [&](int rank) { return soakRank(ids, testId, rank, calls); }, int(120 + calls / 200)));
}
