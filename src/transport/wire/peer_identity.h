// SPDX-License-Identifier: BSD-3-Clause
// Who a rank is, as far as wires care: which host (boot id + hostname, so two
// containers on one kernel count as one host), which pid namespace, which pid.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn {

struct PeerIdentity {
  uint64_t hostHash = 0;
  uint64_t pidNamespace = 0;  // inode of /proc/self/ns/pid, 0 if unknown
  int32_t pid = 0;
  int32_t hasRdmaDevice = 0;
};

PeerIdentity localPeerIdentity();

// True when the process exists and is not a zombie. Only meaningful for a
// peer on this host in this pid namespace.
bool processAlive(int32_t pid);

// Every rank's identity out of gathered setup blobs that each carry one.
template <typename Blob>
std::vector<PeerIdentity> identitiesOf(const std::vector<Blob>& blobs) {
  std::vector<PeerIdentity> ids;
  for (const Blob& b : blobs) ids.push_back(b.identity);
  return ids;
}

// Notices that a peer process exited, for wires whose peers all live on this
// host (a killed peer never raises its flag: no need to wait for the
// timeout). Only peers in this pid namespace can be checked.
class PeerExitWatch {
 public:
  // Starts watching; fails with rcnInvalidUsage (why names the rank) when a
  // rank is on another host, which every rank then finds alike. `wire` (a
  // name with static storage) also names the wire in check()'s message.
  rcnResult_t watch(const std::vector<PeerIdentity>& peers, int self, const char* wire, std::string* why);
  // "" while every peer lives (looked at no more than every 20 ms), else
  // "<wire> wire: rank R (pid P) exited". A peer that exited after leaving
  // on purpose (leftOnPurpose(rank), asked after its exit was seen, so a
  // goodbye written before the exit is never missed) is no failure: it is
  // no longer watched.
  std::string check(const std::function<bool(int)>& leftOnPurpose = nullptr);

 private:
  struct WatchedPeer {
    int rank;
    int32_t pid;
  };
  std::vector<WatchedPeer> watched_;
  const char* wire_ = "";
  std::chrono::steady_clock::time_point last_{};
};

// 64 random bits (for names that must not collide across communicators).
uint64_t randomId64();

}  // namespace rcn
