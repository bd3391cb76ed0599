// The p2p path through the public API with every GPU in this process
// (rcnCommInitAll): two communicators sets interleaved, every dtype x op,
// graphs, driven from one thread.
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "p2p_harness.h"
#include "rocenante/rocenante.h"
#include "support/gpu_case.h"

using namespace rcn::test;

namespace {

constexpr int kRanks = 2;
constexpr size_t kMaxBytes = 256 * 1024;

}  // namespace

TEST_CASE("rcnAllReduce over p2p with rcnCommInitAll: every dtype x op, two comms, graphs", "[p2p][gpu][api]") {
  requireGpus(kRanks);
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  setenv("ROCENANTE_TRANSPORT", "p2p", 1);
  rcnComm_t a[kRanks] = {}, b[kRanks] = {};
  REQUIRE(rcnCommInitAll(a, kRanks, nullptr) == rcnSuccess);
  REQUIRE(rcnCommInitAll(b, kRanks, nullptr) == rcnSuccess);
  for (rcnComm_t c : {a[0], a[1], b[0], b[1]}) {
    rcnCommInfo info;
    REQUIRE(rcnCommQuery(c, &info) == rcnSuccess);
    INFO(info.transport << ": " << info.reason);
    REQUIRE(info.path == rcnPathP2p);
    REQUIRE(std::strcmp(info.transport, "p2p-local") == 0);
  }
  std::vector<LocalRank> locals(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    locals[r].rank = r;
    locals[r].device = r;
    locals[r].comms = {commFn(a[r]), commFn(b[r])};
  }
  std::string why;
  {
    BatchRunner runner(kRanks, kMaxBytes, locals, [](const std::vector<uint64_t>& local, std::vector<uint64_t>* all) {
      *all = local;
      return true;
    });
    if (!runner.setUp(&why)) FAIL(why);
    std::vector<Call> calls = everyTypeAndOp(41, kMaxBytes, 2);
    if (!runInBatches(runner, calls, 700, false, &why)) FAIL(why);
    calls.resize(BatchRunner::kMaxCalls * 3);
    if (!runInBatches(runner, calls, 800, true, &why)) FAIL(why);
  }
  for (rcnComm_t c : {a[0], a[1], b[0], b[1]}) {
    rcnResult_t async = rcnInternalError;
    REQUIRE(rcnCommGetAsyncError(c, &async) == rcnSuccess);
    REQUIRE(async == rcnSuccess);
  }
  for (rcnComm_t c : {a[0], a[1], b[0], b[1]}) REQUIRE(rcnCommDestroy(c) == rcnSuccess);
}
