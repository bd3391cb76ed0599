// SPDX-License-Identifier: BSD-3-Clause
// The exit watch that shm and cuda wires use to notice a killed peer without
// waiting for the timeout: a peer on another host is refused at setup; a live
// peer, this process's own rank and a peer in another pid namespace (whose
// pid means nothing here) never read as exited; a peer that exited does,
// named by rank and pid.
#include <catch2/catch_test_macros.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "transport/wire/peer_identity.h"

using namespace rcn;

namespace {

// A child that sleeps until killed; killed and reaped when this goes, so a
// failed REQUIRE leaves nothing behind.
struct SleepingChild {
  pid_t pid = fork();
  SleepingChild() {
    if (pid == 0) {
      sleep(30);
      _exit(0);
    }
  }
  void end() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~SleepingChild() { end(); }
};

// A pid that no process has now: a child that exited and was reaped.
pid_t reapedPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid(pid, nullptr, 0);
  return pid;
}

// check() looks at most every 20 ms after its first look.
std::string checkAfterInterval(PeerExitWatch& watch) {
  std::this_thread::sleep_for(std::chrono::milliseconds(25));
  return watch.check();
}

}  // namespace

TEST_CASE("exit watch: a peer on another host is refused, naming its rank", "[wire]") {
  std::vector<PeerIdentity> peers(3, localPeerIdentity());
  peers[2].hostHash ^= 1;
  PeerExitWatch watch;
  std::string why;
  CHECK(watch.watch(peers, 0, "shm", &why) == rcnInvalidUsage);
  CHECK(why == "shm wire: rank 2 is on another host");
}

TEST_CASE("exit watch: only an exited peer in this pid namespace is reported", "[wire]") {
  const PeerIdentity self = localPeerIdentity();
  SleepingChild child;
  const pid_t gone = reapedPid();
  REQUIRE(child.pid > 0);
  REQUIRE(gone > 0);
  std::vector<PeerIdentity> peers(4, self);
  peers[0].pid = gone;  // this rank: never judged, whatever its pid says
  peers[1].pid = child.pid;
  peers[2].pid = gone;  // in another pid namespace: not ours to judge
  peers[2].pidNamespace = self.pidNamespace + 1;
  peers[3].pid = child.pid;
  PeerExitWatch watch;
  std::string why;
  REQUIRE(watch.watch(peers, 0, "cuda", &why) == rcnSuccess);
  CHECK(watch.check().empty());  // the first look is never put off

  const pid_t childPid = child.pid;
  child.end();
  CHECK(checkAfterInterval(watch) == "cuda wire: rank 1 (pid " + std::to_string(childPid) + ") exited");
}

TEST_CASE("exit watch: a peer that left on purpose before it exited is no failure, and no longer watched", "[wire]") {
  const PeerIdentity self = localPeerIdentity();
  const pid_t gone = reapedPid();
  REQUIRE(gone > 0);
  std::vector<PeerIdentity> peers(3, self);
  peers[1].pid = gone;
  peers[2].pid = gone;
  PeerExitWatch watch;
  std::string why;
  REQUIRE(watch.watch(peers, 0, "shm", &why) == rcnSuccess);
  std::vector<int> asked;
  auto onlyRank1Left = [&](int rank) {
    asked.push_back(rank);
    return rank == 1;
  };
  CHECK(watch.check(onlyRank1Left) == "shm wire: rank 2 (pid " + std::to_string(gone) + ") exited");
  CHECK(asked == std::vector<int>{1, 2});  // asked of exited peers only, in rank order
  asked.clear();
  CHECK(checkAfterInterval(watch).find("rank 2") != std::string::npos);  // rank 1 is no longer watched
  CHECK(watch.check().empty());  // within the interval: not looked at again
  std::this_thread::sleep_for(std::chrono::milliseconds(25));
  CHECK(watch.check([](int) { return true; }).empty());
  CHECK(checkAfterInterval(watch).empty());  // nobody is watched any more
}
