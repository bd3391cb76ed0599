// The exit watch that shm and cuda wires use to notice a killed peer without
// waiting for the timeout: a peer on another host is refused at setup; a live
// peer, this process itself and a peer in another pid namespace (whose pid
// means nothing here) never read as exited; a peer that exited does, named by
// rank and pid, once 20 ms have passed since the last look.
#include <catch2/catch_test_macros.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "transport/wire/peer_identity.h"

using namespace rcn;

namespace {

// A child that sleeps until killed (or 30 s, should the test fail first).
pid_t sleepingChild() {
  const pid_t pid = fork();
  if (pid == 0) {
    sleep(30);
    _exit(0);
  }
  return pid;
}

// A pid that no process has: a child that exited and was reaped.
pid_t reapedPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

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
  const pid_t child = sleepingChild();
  REQUIRE(child > 0);
  std::vector<PeerIdentity> peers(4, self);
  peers[1].pid = child;
  peers[2].pid = reapedPid();  // gone, but in another pid namespace: not ours to judge
  peers[2].pidNamespace = self.pidNamespace + 1;
  peers[3].pid = child;
  PeerExitWatch watch;
  std::string why;
  REQUIRE(watch.watch(peers, 0, "cuda", &why) == rcnSuccess);
  CHECK(checkAfterInterval(watch).empty());

  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  const std::string gone = checkAfterInterval(watch);
  CHECK(gone == "cuda wire: rank 1 (pid " + std::to_string(child) + ") exited");
  CHECK(watch.check().empty());  // looked less than 20 ms ago
}
