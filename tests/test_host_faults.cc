// SPDX-License-Identifier: BSD-3-Clause
// Fault injection on the host backend: a rank killed in the middle of its
// calls, a rank that never joins, a rank that never calls, a corrupted tcp
// frame, a sender stuck mid-frame. Every surviving rank must get an error,
// name a peer, and never hang.
#include <catch2/catch_test_macros.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/scoped_env.h"
#include "test_host_util.h"
#include "transport/wire/tcp_wire.h"

using namespace rcn;
using namespace rcn::test;

namespace {

constexpr uint64_t kTimeoutMs = 3000;
constexpr int kSurvivorError = 0;  // what a survivor returns when it saw the error it should
constexpr int kNoError = 10;

std::unique_ptr<FastPath> buildPath(Bootstrap* bs, const char* wire) {
  setenv("ROCENANTE_WIRE", wire, 1);
  std::unique_ptr<FastPath> path;
  std::string why;
  if (createHostPath(hostContext(bs, 1 << 16, kTimeoutMs), &path, &why) != rcnSuccess) return nullptr;
  return path;
}

// Calls until one fails; returns how it ended. A survivor must fail within
// the timeout plus slack, and asyncError must name the problem.
int callUntilError(FastPath* path, int rank, double limitSec) {
  std::vector<float> in(4096, 1.0f), out(4096);
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    rcnResult_t res = path->allReduce(in.data(), out.data(), in.size(), rcnFloat32, rcnSum, nullptr);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (res != rcnSuccess) {
      std::string why;
      if (path->asyncError(&why) == rcnSuccess || why.find("rank") == std::string::npos) return 20;
      std::fprintf(stderr, "rank %d got the error after %.2f s: %s\n", rank, took, why.c_str());
      // Later calls fail at once.
      if (path->allReduce(in.data(), out.data(), 16, rcnFloat32, rcnSum, nullptr) == rcnSuccess) return 21;
      return took < limitSec ? kSurvivorError : 22;
    }
    if (took > limitSec) return kNoError;
  }
}

void expectSurvivorsFail(const std::vector<RankOutcome>& outcomes, int victim) {
  std::string report;
  allSucceeded(outcomes, &report);
  INFO(report);
  for (int r = 0; r < int(outcomes.size()); ++r) {
    if (r == victim) continue;
    CHECK(!outcomes[r].timedOut);
    CHECK(outcomes[r].exitCode == kSurvivorError);
  }
}

// blames: what each survivor's reason must contain one of, naming the dead
// rank (not a survivor that shut its connections after seeing the death).
void killedMidCall(const char* wire, const std::vector<std::string>& blames) {
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  const int nranks = 3, victim = 2;
  auto outcomes = runRanks(nranks, [&](int rank) {
    auto bs = joinBootstrap(id, rank, nranks);
    if (!bs) return 30;
    auto path = buildPath(bs.get(), wire);
    if (!path) return 31;
    if (rank == victim) {
      // Die at an arbitrary moment while calls are in flight.
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        raise(SIGKILL);
      }).detach();
    }
    const int outcome = callUntilError(path.get(), rank, (kTimeoutMs + 4000) / 1000.0);
    std::string why;
    path->asyncError(&why);
    const bool blamesVictim =
        std::any_of(blames.begin(), blames.end(), [&](const std::string& b) { return why.find(b) != std::string::npos; });
    if (outcome == kSurvivorError && !blamesVictim) return 23;
    // Stay a moment, so that a peer still reading this rank's last frame
    // does not find the connection reset by this process's exit.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return outcome;
  }, 60);
  CHECK(outcomes[victim].signal == SIGKILL);
  expectSurvivorsFail(outcomes, victim);
}

// One all-reduce that should fail: whether it did, how long it took, and
// the path's reason (printed).
struct FailedCall {
  bool failed;
  double seconds;
  std::string why;
};

FailedCall callOnce(int rank, FastPath* path) {
  std::vector<float> in(256, 1.0f), out(256);
  const auto start = std::chrono::steady_clock::now();
  FailedCall call;
  call.failed = path->allReduce(in.data(), out.data(), 256, rcnFloat32, rcnSum, nullptr) != rcnSuccess;
  call.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  path->asyncError(&call.why);
  std::fprintf(stderr, "rank %d: %.2f s: %s\n", rank, call.seconds, call.why.c_str());
  return call;
}

// A survivor whose error is checked stays a while before it exits: over shm
// a peer's exit is news too, and a slower survivor (under a sanitizer) could
// hear of it before the event the case checks.
void lingerBeforeExit() { std::this_thread::sleep_for(std::chrono::milliseconds(kTimeoutMs / 2)); }

}  // namespace

TEST_CASE("host backend over shm: a rank killed mid-call fails every survivor", "[host][fault]") {
  killedMidCall("shm", {"rank 2 (pid"});
}

TEST_CASE("host backend over tcp: a rank killed mid-call fails every survivor", "[host][fault]") {
  // Its reader sees the close, or a writer the broken pipe.
  killedMidCall("tcp", {"rank 2 closed its connection", "lost its connection to rank 2"});
}

TEST_CASE("host backend: a rank that never calls makes the others time out naming it", "[host][fault]") {
  for (const char* wire : {"shm", "tcp"}) {
  INFO(wire);
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  const int nranks = 3, idle = 1;
  auto outcomes = runRanks(nranks, [&](int rank) {
    auto bs = joinBootstrap(id, rank, nranks);
    if (!bs) return 30;
    auto path = buildPath(bs.get(), wire);
    if (!path) return 31;
    if (rank == idle) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kTimeoutMs + 1500));
      return 0;
    }
    const FailedCall call = callOnce(rank, path.get());
    lingerBeforeExit();
    if (!call.failed) return 40;
    // Each names the idle rank, not the survivor that timed out first and
    // shut its connections (over tcp it tells why first).
    if (call.why.find("timed out after") == std::string::npos ||
        call.why.find("waiting for rank 1") == std::string::npos)
      return 41;
    if (call.why.find("closed its connection") != std::string::npos) return 43;
    return call.seconds < kTimeoutMs / 1000.0 + 1.5 ? 0 : 42;
  }, 60);
  checkRanks(outcomes);
  }
}

TEST_CASE("host backend: ranks that make different calls all get an error naming both", "[host][fault]") {
  // Count (within one slot and past it: chunked), type and op: each differs on rank 2 only.
  struct Call {
    size_t count;
    rcnDataType_t dtype;
    rcnRedOp_t op;
  };
  const Call same{1000, rcnFloat32, rcnSum};
  for (const char* wire : {"shm", "tcp"})
  for (const Call odd : {Call{1001, rcnFloat32, rcnSum}, Call{100000, rcnFloat32, rcnSum},
                         Call{1000, rcnInt32, rcnSum}, Call{1000, rcnFloat32, rcnMax}}) {
    rcnUniqueId id;
    REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
    const int nranks = 3;
    auto outcomes = runRanks(nranks, [&](int rank) {
      auto bs = joinBootstrap(id, rank, nranks);
      if (!bs) return 30;
      auto path = buildPath(bs.get(), wire);
      if (!path) return 31;
      const Call c = rank == 2 ? odd : same;
      std::vector<float> in(c.count, 1.0f), out(c.count, -1.0f);
      if (path->allReduce(in.data(), out.data(), c.count, c.dtype, c.op, nullptr) != rcnInvalidUsage) return 40;
      std::string why;
      path->asyncError(&why);
      if (why.find("every rank must make the same call") == std::string::npos) return 41;
      // Rank 2 sees both others differ; each other rank at least rank 2.
      if (rank != 2 && why.find("rank 2 with") == std::string::npos) return 42;
      if (out[0] != -1.0f) return 43;  // nothing reduced into the output
      // No rank exits (a lost peer, to the others' wires) before every rank has seen the mismatch.
      return bs->barrier() == rcnSuccess ? 0 : 44;
    }, 60);
    checkRanks(outcomes);
  }
}

TEST_CASE("host backend: a rank that never joins fails the others' setup in bounded time", "[host][fault]") {
  const ScopedEnv shortTimeout("ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "2000");
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  const int nranks = 3, absent = 2;
  auto outcomes = runRanks(nranks, [&](int rank) {
    if (rank == absent) return 0;  // never shows up
    auto bs = joinBootstrap(id, rank, nranks);
    if (!bs) return 0;  // the bootstrap noticed: that is the error we want
    return buildPath(bs.get(), "tcp") ? 50 : 0;
  }, 30);
  checkRanks(outcomes);
}

namespace {

// Ranks over tcp that make `calls` good calls and then meet, so that no rank
// is still in one when the fault starts (a corrupted call may otherwise reach
// a rank still in its last good one, which then fails there: seen once in
// CI), then run fault(rank, path).
std::vector<RankOutcome> faultAfterGoodCalls(int nranks, int calls, const std::function<int(int, FastPath*)>& fault,
                                             const char* wire = "tcp") {
  rcnUniqueId id;
  REQUIRE(bootstrapGetUniqueId(&id) == rcnSuccess);
  return runRanks(nranks, [&](int rank) {
    auto bs = joinBootstrap(id, rank, nranks);
    if (!bs) return 30;
    auto path = buildPath(bs.get(), wire);
    if (!path) return 31;
    std::vector<float> in(256, 1.0f), out(256);
    for (int i = 0; i < calls; ++i)
      if (path->allReduce(in.data(), out.data(), 256, rcnFloat32, rcnSum, nullptr) != rcnSuccess) return 32;
    if (bs->barrier() != rcnSuccess) return 33;
    return fault(rank, path.get());
  }, 60);
}

}  // namespace

TEST_CASE("host backend over tcp: a corrupted frame fails every rank", "[host][fault]") {
  const int corrupter = 1;
  checkRanks(faultAfterGoodCalls(3, 5, [&](int rank, FastPath* path) {
    if (rank == corrupter) gTcpWireCorruptFrames.store(1);
    return callUntilError(path, rank, (kTimeoutMs + 4000) / 1000.0);
  }));
}

TEST_CASE("host backend over tcp: a sender stuck mid-frame fails both ranks, saying the payload stalled",
          "[host][fault]") {
  const int staller = 1;
  checkRanks(faultAfterGoodCalls(2, 1, [&](int rank, FastPath* path) {
    if (rank == staller) gTcpWireStallFrames.store(1);
    // The receiver calls late, so the frame's stall (counted from its header)
    // runs out before the receiver's own wait for the flag could.
    else std::this_thread::sleep_for(std::chrono::milliseconds(kTimeoutMs / 2));
    const FailedCall call = callOnce(rank, path);
    if (!call.failed) return 40;
    if (call.why.find("payload stalled") == std::string::npos) return 41;
    if (call.why.find("from rank 1") == std::string::npos) return 42;  // names the stuck sender
    return call.seconds < kTimeoutMs / 1000.0 + 1.5 ? 0 : 43;
  }));
}

TEST_CASE("host backend: a rank that destroyed its communicator fails the others' next call at once",
          "[host][fault]") {
  for (const char* wire : {"tcp", "shm"}) {
    INFO("wire " << wire);
    const int leaver = 1;
    checkRanks(faultAfterGoodCalls(3, 2, [&](int rank, FastPath* path) {
      if (rank == leaver) return 0;  // its path is destroyed on return: its goodbye to every peer
      const FailedCall call = callOnce(rank, path);
      lingerBeforeExit();
      if (!call.failed) return 40;
      if (call.why.find("waiting for rank 1") == std::string::npos) return 41;
      if (call.why.find("destroyed its communicator") == std::string::npos) return 42;
      return call.seconds < kTimeoutMs / 2000.0 ? 0 : 43;  // well before the timeout
    }, wire));
  }
}

TEST_CASE("host backend over tcp: a rank's abort reaches the others as its reason", "[host][fault]") {
  const int aborter = 0;
  checkRanks(faultAfterGoodCalls(3, 1, [&](int rank, FastPath* path) {
    if (rank == aborter) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others wait in a call by now
      path->abort();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its frames are read before its exit
      return 0;
    }
    const FailedCall call = callOnce(rank, path);
    if (!call.failed) return 40;
    if (call.why.find("rank 0 aborted its communicator") == std::string::npos) return 41;
    return call.seconds < kTimeoutMs / 2000.0 ? 0 : 42;  // well before the timeout
  }));
}
