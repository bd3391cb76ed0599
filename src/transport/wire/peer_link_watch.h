// SPDX-License-Identifier: BSD-3-Clause
// Notices at once that a peer process on another host ended without saying
// goodbye (killed, crashed, _exit): one idle TCP connection per pair of
// ranks, which carries nothing and which the kernel closes when its process
// ends, however it ends. The RDMA path has no such signal: a dead peer's
// queue pairs vanish silently and a write to them fails only after the
// QP's retry timeout (seconds to minutes).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/auth.h"
#include "core/bootstrap.h"
#include "rocenante/rocenante.h"

namespace rcn {

class PeerLinkWatch {
 public:
  PeerLinkWatch() = default;
  PeerLinkWatch(const PeerLinkWatch&) = delete;
  PeerLinkWatch& operator=(const PeerLinkWatch&) = delete;
  // Closing the connections is what tells the peers this rank is gone.
  ~PeerLinkWatch() { closeAll(); }

  // Collective over boot: every rank listens on the bootstrap's interface
  // (ROCENANTE_SOCKET_IFNAME/NCCL_SOCKET_IFNAME), the addresses and a fresh
  // key are exchanged, and each rank connects to every higher one,
  // proving the key (core/auth.h) as the tcp wire's connections do. `wire` (static
  // storage) names the wire in messages. Bounded by timeoutMs; why names
  // the peer that could not be reached. Every rank must call it.
  rcnResult_t connect(Bootstrap& boot, uint64_t timeoutMs, const char* wire, std::string* why);
  // "" while every connection is open (looked at no more than every
  // millisecond), else "<wire> wire: rank R exited ...". A peer that left
  // on purpose (leftOnPurpose(rank)) is no failure: it is no longer
  // watched. Its goodbye may still be on its way when its connection
  // closes (a receive completion the caller has not reaped yet), so a
  // closed connection counts as an exit only once kGoodbyeGraceMs passed
  // without leftOnPurpose turning true.
  std::string check(const std::function<bool(int)>& leftOnPurpose);
  static constexpr int64_t kGoodbyeGraceMs = 20;
  void closeAll();

 private:
  rcnResult_t acceptFromLower(int listenFd, const AuthKey& key, uint64_t timeoutMs, std::string* why);
  void noteClosed(std::chrono::steady_clock::time_point now);

  int rank_ = 0;
  std::vector<int> fds_;  // per rank; -1 for this rank and peers no longer watched
  std::vector<std::chrono::steady_clock::time_point> closedAt_;  // per rank: when its connection closed, or {}
  const char* wire_ = "";
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace rcn
