// The host backend through the public API, as on a machine without a GPU:
// rcnCommInitRank with ROCENANTE_BACKEND=host, rcnAllReduce on host pointers
// (any size: no NCCL behind it), rcnCommQuery, rcnCommGetDeviceComm (refused), rcnCommDestroy.
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>

#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "test_host_util.h"

using namespace rcn;
using namespace rcn::test;

namespace {

int runRank(const rcnUniqueId& id, int rank, int nranks, const char* wire, bool forced) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  setenv("ROCENANTE_WIRE", wire, 1);
  // Forced, the self-test's largest size is its own cap, not the host path's unbounded one.
  if (forced) setenv("ROCENANTE_FORCE", "rocenante", 1);
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, nranks, id, rank) != rcnSuccess) return 70;
  rcnCommInfo info{};
  if (rcnCommQuery(comm, &info) != rcnSuccess) return 71;
  if (info.path != rcnPathHost || info.cudaDev != -1 ||
      std::string(info.transport) != std::string("host-") + wire) {
    std::fprintf(stderr, "rank %d: path %d transport '%s' reason '%s'\n", rank, info.path,
                 info.transport, info.reason);
    return 72;
  }
  if (forced && info.selfTestPassed != 1) return 75;
  rcnDeviceComm dev{};  // the device API is the p2p path's only
  if (rcnCommGetDeviceComm(comm, &dev) != rcnInvalidUsage) return 74;
  int failures = 0;
  uint64_t seed = 100;
  // Larger than ROCENANTE_MAX_BYTES (256 KB by default): chunked, no NCCL.
  for (size_t count : {size_t(3), size_t(12288), size_t(300000)}) {
    for (rcnDataType_t t : {rcnFloat32, rcnBfloat16, rcnFloat16, rcnInt64}) {
      ++seed;
      auto in = rankInput(seed, rank, nranks, count, t, rcnSum);
      std::vector<uint8_t> out(in.size(), kPoisonByte);
      if (rcnAllReduce(in.data(), out.data(), count, t, rcnSum, comm, nullptr) != rcnSuccess) return 73;
      failures += checkAgainstReference(out.data(), seed, nranks, count, t, rcnSum, wire) != 0;
    }
  }
  rcnResult_t async = rcnInProgress;
  if (rcnCommGetAsyncError(comm, &async) != rcnSuccess || async != rcnSuccess) ++failures;
  if (rcnCommDestroy(comm) != rcnSuccess) ++failures;
  return failures;
}

void runAll(int nranks, const char* wire, bool forced = false) {
  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  checkRanks(runRanks(nranks, [&](int rank) { return runRank(id, rank, nranks, wire, forced); }, 90));
}

}  // namespace

TEST_CASE("public API on the host backend over shm", "[host][api]") { runAll(2, "shm"); }
TEST_CASE("public API on the host backend over tcp", "[host][api]") { runAll(3, "tcp"); }
TEST_CASE("public API on the host backend, forced", "[host][api]") { runAll(2, "shm", true); }
