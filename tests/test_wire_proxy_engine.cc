// The proxy engine without a GPU: each rank runs a CPU stand-in for the
// proxy kernel (stage a slice, ring the block's doorbell, wait for every
// peer's flag, check the peer's slice) against the real ProxyEngine over the
// shm and tcp wires, with grids that change from call to call, and with a
// rank killed mid-run: the survivors' engines must fail and raise the abort
// flag the kernels watch.
#include <catch2/catch_test_macros.hpp>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "support/multiproc.h"
#include "test_host_util.h"
#include "transport/proxy/proxy_engine.h"
#include "transport/wire/exchange_layout.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kBlocks = 4;
constexpr size_t kSlotBytes = 4096;
constexpr int kCalls = 300;

uint8_t pattern(int rank, uint32_t call, size_t byte) { return uint8_t(rank * 31 + call * 7 + byte); }

struct FakeKernel {
  int rank, nranks;
  Wire* wire;
  ExchangeLayout layout;
  ProxyDoorbell* doorbells;
  volatile uint32_t* abortFlag;

  // The same grid on every rank, changing from call to call.
  static int gridOf(uint32_t call) { return 1 + int(call % kBlocks); }

  // One call; 0 on success, 1 on a bad slice, 2 when a wait gave up.
  int run(uint32_t call) {
    const int phase = int(call & 1), grid = gridOf(call);
    const size_t bytes = 16 * (1 + call % 200);  // the call's message, split over the grid
    const size_t perBlock = (bytes / 16 + grid - 1) / grid * 16;
    uint8_t* own = wire->region() + layout.slotOffset(phase, rank);
    for (size_t i = 0; i < bytes; ++i) own[i] = pattern(rank, call, i);
    for (int b = 0; b < grid; ++b) {
      ProxyDoorbell* d = doorbells + size_t(phase) * kBlocks + b;
      size_t begin = std::min(bytes, b * perBlock), end = std::min(bytes, begin + perBlock);
      d->blocks = uint32_t(grid);
      d->offset = uint32_t(begin);
      d->bytes = uint32_t(end - begin);
      __atomic_store_n(&d->call, call, __ATOMIC_RELEASE);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (int p = 0; p < nranks; ++p) {
      if (p == rank) continue;
      for (int b = 0; b < grid; ++b) {
        uint32_t* flag = wire->flags() + layout.flagIndex(phase, p, b);
        while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != call) {
          if (*abortFlag || std::chrono::steady_clock::now() > deadline) return 2;
          std::this_thread::yield();
        }
        *flag = 0;
      }
      const uint8_t* slot = wire->region() + layout.slotOffset(phase, p);
      for (size_t i = 0; i < bytes; ++i)
        if (slot[i] != pattern(p, call, i)) return 1;
    }
    return 0;
  }
};

int runRank(const rcnUniqueId& id, int rank, int nranks, const char* wireName, int victim) {
  setenv("ROCENANTE_WIRE", wireName, 1);
  auto bs = joinBootstrap(id, rank, nranks);
  if (!bs) return 50;
  FastPathContext ctx = hostContext(bs.get(), kSlotBytes, 3000);
  ExchangeLayout layout = ExchangeLayout::make(nranks, kSlotBytes, kBlocks);
  WireKind kind;
  parseWireKind(wireName, &kind);
  std::unique_ptr<Wire> wire;
  std::string why;
  if (createWire(ctx, kind, layout.wireLayout(), &wire, &why) != rcnSuccess || !wire) return 51;
  std::vector<ProxyDoorbell> doorbells(2 * kBlocks);
  std::memset(doorbells.data(), 0, doorbells.size() * sizeof(ProxyDoorbell));
  volatile uint32_t abortFlag = 0;
  ProxyEngine engine(wire.get(), layout, rank, doorbells.data(), &abortFlag, 50, 2);
  if (engine.lanes() != (wire->concurrentPuts() ? 2 : 1)) return 52;
  engine.start();
  FakeKernel kernel{rank, nranks, wire.get(), layout, doorbells.data(), &abortFlag};
  for (uint32_t call = 1; call <= kCalls; ++call) {
    if (rank == victim && call == kCalls / 2) raise(SIGKILL);
    int res = kernel.run(call);
    if (res == 1) return 53;
    if (res == 2) {
      if (victim < 0) return 54;
      // A survivor: its engine must have failed and raised the abort flag.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (engine.error(&why) == rcnSuccess && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::fprintf(stderr, "rank %d: engine error: %s\n", rank, why.c_str());
      engine.stop();
      return (engine.error(&why) != rcnSuccess && abortFlag == 1) ? 0 : 55;
    }
  }
  if (victim >= 0) return 56;  // a survivor should not have finished
  if (engine.drain(kCalls, 3000) != rcnSuccess) return 57;
  engine.stop();
  wire->close();
  return engine.error(&why) == rcnSuccess ? 0 : 58;
}

void runAll(int nranks, const char* wire, int victim) {
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  auto outcomes = runRanks(nranks, [&](int rank) { return runRank(id, rank, nranks, wire, victim); }, 60);
  std::string report;
  allSucceeded(outcomes, &report);
  INFO(report);
  for (int r = 0; r < nranks; ++r) {
    if (r == victim) {
      CHECK(outcomes[r].signal == SIGKILL);
      continue;
    }
    CHECK(outcomes[r].exitCode == 0);
    CHECK_FALSE(outcomes[r].timedOut);
  }
}

}  // namespace

TEST_CASE("proxy engine forwards every block of changing grids over shm", "[proxy][shm]") {
  runAll(3, "shm", -1);
}

TEST_CASE("proxy engine forwards every block of changing grids over tcp", "[proxy][tcp]") {
  runAll(3, "tcp", -1);
}

TEST_CASE("proxy engine: a rank killed mid-run fails the survivors' engines (shm)", "[proxy][fault]") {
  runAll(3, "shm", 2);
}

TEST_CASE("proxy engine: a rank killed mid-run fails the survivors' engines (tcp)", "[proxy][fault]") {
  runAll(3, "tcp", 2);
}
