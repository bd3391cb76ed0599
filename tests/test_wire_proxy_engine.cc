// SPDX-License-Identifier: BSD-3-Clause
// The proxy engine without a GPU: each rank runs a CPU stand-in for the
// proxy kernel against the real ProxyEngine over the shm and tcp wires, with
// grids and protocols that change from call to call: flags (stage a slice,
// ring the block's doorbell, wait for every peer's flag, check the peer's
// slice), LL (ring first, then write tagged lines; poll the peers' lines) and
// staged LL (write the lines, then ring: the engine must put them unread).
// Faults: a rank killed mid-run (the survivors' engines must fail and raise
// the abort flag the kernels watch), a kernel that rings an LL doorbell but
// never writes its lines (its own engine must give up within the timeout),
// and a rank whose call has another signature (in the flags protocol every
// rank must find a flag of another call).
// Before a clean run, the shm and tcp wires must refuse puts to no other
// rank, outside the region or to no flag (test_verbs_wire checks verbs').
// The clean run and the mismatch also run over the software NIC of
// verbs_mock.h, weakly ordered, with ranks as threads.
#include <catch2/catch_test_macros.hpp>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "support/multiproc.h"
#include "test_host_util.h"
#include "transport/proxy/proxy_engine.h"
#include "transport/wire/exchange_layout.h"
#if ROCENANTE_HAVE_IBVERBS
#include "verbs_mock_scope.h"
#endif

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr int kBlocks = 4;
constexpr size_t kSlotBytes = 4096;
constexpr size_t kLlMaxBytes = 2048;
constexpr int kCalls = 300;
constexpr uint64_t kTimeoutMs = 3000;

// What a rank does wrong on purpose.
enum class Fault { None, Killed, Stalled, Mismatch };

uint8_t pattern(int rank, uint32_t call, size_t byte) { return uint8_t(rank * 31 + call * 7 + byte); }

struct FakeKernel {
  int rank, nranks;
  Wire* wire;
  ExchangeLayout layout;
  ProxyDoorbell* doorbells;
  volatile uint32_t* abortFlag;

  // The same grid on every rank, changing from call to call (before
  // proxyBlocksFor drops the blocks the kernel's rounding would leave empty).
  static int gridOf(uint32_t call) { return 1 + int(call % kBlocks); }

  uint32_t signature = 0;  // of the call being run: what its flags must carry

  // Every rank's signature of a call (a stand-in for callSignature's hash).
  static uint32_t signatureOf(uint32_t call) { return (call * 2654435761u) >> 1; }

  // One call; 0 on success, 1 on a bad slice, 2 when a wait gave up, 3 when a
  // peer's flag carried another call. stall: ring the doorbells of an LL
  // call but never write the lines; odd: this rank's call has another signature.
  int run(uint32_t call, bool stall = false, bool odd = false) {
    const size_t bytes = 16 * (1 + call % 200);  // the call's message, split over the grid
    const bool ll = call % 2 == 0 && bytes <= kLlMaxBytes;
    const bool staged = call % 4 == 2;
    signature = signatureOf(call) ^ (odd ? 1u : 0u);
    return ll ? runLL(call, bytes, staged, stall) : runFlags(call, bytes);
  }

  // As the kernel's ringDoorbell: each field in one 8-byte word with its tag,
  // the signature in the flags protocol only.
  void ring(int phase, int block, uint32_t call, int grid, uint32_t protocol, size_t offset, size_t bytes) {
    uint64_t* words = reinterpret_cast<uint64_t*>(doorbells + size_t(phase) * kBlocks + block);
    const uint32_t value[kProxyDoorbellFields] = {uint32_t(grid), protocol, uint32_t(offset), uint32_t(bytes),
                                                  signature};
    const int fields = protocol == kProxyFlags ? kProxyDoorbellFields : kProxyDoorbellFields - 1;
    for (int i = 0; i < fields; ++i) __atomic_store_n(&words[i], value[i] | uint64_t(call) << 32, __ATOMIC_RELEASE);
  }

  // As the kernel's takeFlag: 0 once peer's flag of block b holds this
  // call's tag (then cleared), 3 for another nonzero value, 2 on abort or timeout.
  int takeFlag(int phase, int peer, int b, uint32_t call, std::chrono::steady_clock::time_point deadline) {
    uint32_t* flag = wire->flags() + layout.flagIndex(phase, peer, b);
    const uint32_t want = callTag(call, signature);
    for (uint32_t v; (v = __atomic_load_n(flag, __ATOMIC_ACQUIRE)) != want;) {
      if (v != 0) return 3;
      if (*abortFlag || std::chrono::steady_clock::now() > deadline) return 2;
      std::this_thread::yield();
    }
    *flag = 0;
    return 0;
  }

  // Every block's doorbell for a call over `units` 16-byte units (of the
  // slot, or LL lines), shared out over the grid as the kernel does; returns the grid.
  int ringGrid(int phase, uint32_t call, size_t units, uint32_t protocol) {
    const int grid = proxyBlocksFor(units, gridOf(call));
    for (int b = 0; b < grid; ++b) {
      const ProxyBlockRange range = proxyBlockRange(units, grid, b);
      ring(phase, b, call, grid, protocol, range.begin * 16, (range.end - range.begin) * 16);
    }
    return grid;
  }

  int runFlags(uint32_t call, size_t bytes) {
    const int phase = int(call & 1);
    uint8_t* own = wire->region() + layout.slotOffset(phase, rank);
    for (size_t i = 0; i < bytes; ++i) own[i] = pattern(rank, call, i);
    const int grid = ringGrid(phase, call, bytes / 16, kProxyFlags);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
    for (int p = 0; p < nranks; ++p) {
      if (p == rank) continue;
      for (int b = 0; b < grid; ++b)
        if (int res = takeFlag(phase, p, b, call, deadline)) return res;
      const uint8_t* slot = wire->region() + layout.slotOffset(phase, p);
      for (size_t i = 0; i < bytes; ++i)
        if (slot[i] != pattern(p, call, i)) return 1;
    }
    return 0;
  }

  // 8 data bytes per 16-byte line, each 4 in a word with the line tag of
  // the call (and of a signature, which the proxy does not read) as its tag.
  static uint64_t word(int rank, uint32_t call, size_t unit, int half) {
    uint32_t data = 0;
    for (int k = 0; k < 4; ++k) data |= uint32_t(pattern(rank, call, unit * 8 + half * 4 + k)) << (8 * k);
    return data | uint64_t(proxyLineTag(call, 0x5a5a + call)) << 32;
  }

  int runLL(uint32_t call, size_t bytes, bool staged, bool stall) {
    const size_t units = bytes / 8;  // 8 data bytes a 16-byte line
    const int phase = int(call & 1);
    if (!staged) ringGrid(phase, call, units, kProxyLL);
    if (stall) return 2;
    uint64_t* own = reinterpret_cast<uint64_t*>(wire->region() + layout.llSlotOffset(phase, rank));
    for (size_t u = 0; u < units; ++u)
      for (int h = 0; h < 2; ++h) __atomic_store_n(&own[2 * u + h], word(rank, call, u, h), __ATOMIC_RELEASE);
    if (staged) ringGrid(phase, call, units, kProxyLLStaged);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
    const uint32_t tag = uint32_t(word(rank, call, 0, 0) >> 32);  // every line of this call carries it
    for (int p = 0; p < nranks; ++p) {
      if (p == rank) continue;
      const uint64_t* lines = reinterpret_cast<const uint64_t*>(wire->region() + layout.llSlotOffset(phase, p));
      for (size_t u = 0; u < units; ++u) {
        for (int h = 0; h < 2; ++h) {
          uint64_t w;
          while (uint32_t((w = __atomic_load_n(&lines[2 * u + h], __ATOMIC_ACQUIRE)) >> 32) != tag) {
            if (*abortFlag || std::chrono::steady_clock::now() > deadline) return 2;
            std::this_thread::yield();
          }
          if (w != word(p, call, u, h)) return 1;
        }
      }
    }
    return 0;
  }
};

// Puts to no other rank, outside the region or to no flag are refused before
// anything is sent: the run that follows would fail on a stray frame or store.
int refusesBadPuts(Wire& wire, int rank, int nranks) {
  const WireLayout& l = wire.layout();
  const int peer = (rank + 1) % nranks;
  const bool refused[] = {
      wire.put(rank, 0, 0, 16) == rcnInvalidArgument,
      wire.put(-1, 0, 0, 16) == rcnInvalidArgument,
      wire.put(nranks, 0, 0, 16) == rcnInvalidArgument,
      wire.put(peer, 0, l.regionBytes - 10, 100) == rcnInvalidArgument,
      wire.put(peer, l.regionBytes - 10, 0, 100) == rcnInvalidArgument,
      wire.putFlag(rank, 0, 1) == rcnInvalidArgument,
      wire.putFlag(peer, l.flagCount, 1) == rcnInvalidArgument,
  };
  for (bool r : refused)
    if (!r) return 1;
  return 0;
}

// One rank's run over bs (a process's TCP bootstrap, or a thread's
// in-process one). faultCall: the call the victim's fault hits (100 is an
// LL call, 101 a flags one).
int runRankOn(std::unique_ptr<Bootstrap> bs, int rank, int nranks, const char* wireName, int victim, Fault fault,
              uint32_t faultCall) {
  if (!bs) return 50;
  FastPathContext ctx = hostContext(bs.get(), kSlotBytes, kTimeoutMs);
  ExchangeLayout layout = ExchangeLayout::make(nranks, kSlotBytes, kBlocks, kLlMaxBytes);
  WireKind kind;
  parseWireKind(wireName, &kind);
  std::unique_ptr<Wire> wire;
  std::string why;
  if (createWire(ctx, kind, layout.wireLayout(), &wire, &why) != rcnSuccess || !wire) return 51;
  if (victim < 0 && refusesBadPuts(*wire, rank, nranks) != 0) return 60;
  std::vector<ProxyDoorbell> doorbells(2 * kBlocks);
  std::memset(doorbells.data(), 0, doorbells.size() * sizeof(ProxyDoorbell));
  volatile uint32_t abortFlag = 0;
  // The stalled kernel's own engine gives up after a short timeout.
  const uint64_t engineTimeoutMs = fault == Fault::Stalled && rank == victim ? 300 : kTimeoutMs;
  ProxyEngine engine(wire.get(), layout, rank, doorbells.data(), &abortFlag, 50, 2, engineTimeoutMs);
  if (engine.lanes() != (wire->concurrentPuts() ? 2 : 1)) return 52;
  engine.start();
  FakeKernel kernel{rank, nranks, wire.get(), layout, doorbells.data(), &abortFlag};
  for (uint32_t call = 1; call <= kCalls; ++call) {
    const bool faultNow = rank == victim && call == faultCall;
    if (faultNow && fault == Fault::Killed) raise(SIGKILL);
    int res = kernel.run(call, faultNow && fault == Fault::Stalled, faultNow && fault == Fault::Mismatch);
    if (res == 1) return 53;
    if (res == 3) {
      // Every rank, the victim too, must see the other call in this call's
      // flags; each engine forwards until all have (the barrier).
      if (fault != Fault::Mismatch || call != faultCall) return 62;
      if (bs->barrier() != rcnSuccess) return 61;
      engine.stop();
      wire->close();
      return 0;
    }
    if (res == 2) {
      if (victim < 0) return 54;
      // Every rank's engine must fail and raise the abort flag: the stalled
      // one on its timeout, the others when the wire goes down.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (engine.error(&why) == rcnSuccess && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::fprintf(stderr, "rank %d: engine error: %s\n", rank, why.c_str());
      engine.stop();
      if (engine.error(&why) == rcnSuccess || abortFlag != 1) return 55;
      if (rank == victim && why.find("did not arrive") == std::string::npos) return 59;
      return 0;
    }
  }
  if (victim >= 0) return 56;  // a survivor should not have finished
  if (engine.drain(kCalls, 3000) != rcnSuccess) return 57;
  engine.stop();
  const bool clean = engine.error(&why) == rcnSuccess;
  // No rank exits before every engine has stopped: a peer that left early
  // is what the wire reports as a failure (CI saw it once under load).
  if (bs->barrier() != rcnSuccess) return 61;
  wire->close();
  return clean ? 0 : 58;
}

int runRank(const rcnUniqueId& id, int rank, int nranks, const char* wireName, int victim, Fault fault,
            uint32_t faultCall) {
  setenv("ROCENANTE_WIRE", wireName, 1);
  return runRankOn(joinBootstrap(id, rank, nranks), rank, nranks, wireName, victim, fault, faultCall);
}

void runAll(int nranks, const char* wire, int victim = -1, Fault fault = Fault::None, uint32_t faultCall = 100) {
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  auto outcomes = runRanks(
      nranks, [&](int rank) { return runRank(id, rank, nranks, wire, victim, fault, faultCall); }, 60);
  std::string report;
  allSucceeded(outcomes, &report);
  INFO(report);
  for (int r = 0; r < nranks; ++r) {
    if (r == victim && fault == Fault::Killed) {
      CHECK(outcomes[r].signal == SIGKILL);
      continue;
    }
    CHECK(outcomes[r].exitCode == 0);
    CHECK_FALSE(outcomes[r].timedOut);
  }
}

}  // namespace

TEST_CASE("proxy engine forwards every block of changing grids over shm", "[proxy][shm]") {
  runAll(3, "shm");
}

TEST_CASE("proxy engine forwards every block of changing grids over tcp", "[proxy][tcp]") {
  runAll(3, "tcp");
}

#if ROCENANTE_HAVE_IBVERBS
// Over the software NIC, ranks as threads in this process (its RDMA writes
// are memory copies): weak ordering, so the flags protocol is correct only
// through the write-with-immediate flags the engine's first lane turns into
// flags as it reaps them, and the LL protocols only through their tags.
void runAllOnMockVerbs(int nranks, int victim = -1, Fault fault = Fault::None, uint32_t faultCall = 100) {
  MockScope scope(weaklyOrdered());
  auto group = makeLocalBootstrapGroup(nranks);
  std::vector<int> results(nranks, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back(
        [&, r] { results[r] = runRankOn(bootstrapInitLocal(group, r), r, nranks, "verbs", victim, fault, faultCall); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    INFO("rank " << r);
    CHECK(results[r] == 0);
  }
  CHECK(mock::queryQpCalls() == 0);
}

TEST_CASE("proxy engine forwards every block of changing grids over the mocked verbs wire, weakly ordered",
          "[proxy][verbs]") {
  runAllOnMockVerbs(3);
}

TEST_CASE("proxy engine: a rank whose call has another signature is seen over the mocked verbs wire",
          "[proxy][verbs][fault]") {
  runAllOnMockVerbs(2, 0, Fault::Mismatch, 101);
}
#endif

TEST_CASE("proxy engine: a rank killed mid-run fails the survivors' engines (shm)", "[proxy][fault]") {
  runAll(3, "shm", 2, Fault::Killed);
}

TEST_CASE("proxy engine: a rank killed mid-run fails the survivors' engines (tcp)", "[proxy][fault]") {
  runAll(3, "tcp", 2, Fault::Killed);
}

// The engine carries each doorbell's signature into its flags: a rank whose
// call differs is seen by every rank, itself too.
TEST_CASE("proxy engine: a rank whose call has another signature is seen in the flags", "[proxy][fault]") {
  runAll(3, "shm", 1, Fault::Mismatch, 101);
  runAll(2, "tcp", 0, Fault::Mismatch, 101);
}

TEST_CASE("proxy engine: a kernel whose LL lines never come fails its engine within the timeout", "[proxy][fault]") {
  runAll(2, "shm", 1, Fault::Stalled);
}

TEST_CASE("proxy grid: whole cache lines per block, no empty block, the kernel's share", "[proxy][grid]") {
  for (size_t units = 1; units <= 3000; ++units) {
    for (int blocks = 1; blocks <= 40; ++blocks) {
      const int grid = proxyBlocksFor(units, blocks);
      const size_t share = proxyBlockShare(units, grid);
      INFO("units " << units << " blocks " << blocks << " grid " << grid);
      REQUIRE(grid >= 1);
      REQUIRE(grid <= blocks);
      REQUIRE(share % 4 == 0);
      REQUIRE(share == proxyBlockShare(units, blocks));  // the kernel sees the same share
      REQUIRE(share * grid >= units);                      // every item covered
      REQUIRE(share * (grid - 1) < units);                 // the last block is not empty
      size_t next = 0;  // the blocks' ranges tile [0, units) in order
      for (int b = 0; b < grid; ++b) {
        const ProxyBlockRange range = proxyBlockRange(units, grid, b);
        REQUIRE(range.begin == next);
        REQUIRE(range.end > range.begin);
        next = range.end;
      }
      REQUIRE(next == units);
    }
  }
  REQUIRE(proxyBlocksFor(0, 6) == 1);
}
