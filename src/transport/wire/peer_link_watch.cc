// SPDX-License-Identifier: BSD-3-Clause
#include "transport/wire/peer_link_watch.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "core/auth.h"
#include "core/check.h"
#include "core/log.h"
#include "core/socket.h"
#include "transport/wire/tcp_frame.h"

namespace rcn {

namespace {

constexpr const char* kLinkContext = "exit-watch";

// What every rank publishes: where it listens, and (rank 0's is used) the
// key every connection of this communicator's watch proves.
struct LinkBlob {
  SocketAddress addr;
  uint8_t key[kIdSecretBytes];
  int32_t ok;
};

struct LinkHello {
  int32_t rank;
};

}  // namespace

rcnResult_t PeerLinkWatch::connect(Bootstrap& boot, uint64_t timeoutMs, const char* wire, std::string* why) {
  rank_ = boot.rank();
  wire_ = wire;
  const int nranks = boot.nranks();
  fds_.assign(size_t(nranks), -1);
  closedAt_.assign(size_t(nranks), {});
  std::vector<LinkBlob> blobs(static_cast<size_t>(nranks));
  LinkBlob& mine = blobs[size_t(rank_)];
  mine = LinkBlob{};
  RCN_CHECK(randomBytes(mine.key, sizeof mine.key));
  int listenFd = -1;
  SocketAddress pick;
  mine.ok = socketPickListenAddress(&pick) == rcnSuccess && socketListen(pick, &listenFd, &mine.addr) == rcnSuccess;
  RCN_CHECK(boot.allGather(blobs.data(), sizeof(LinkBlob)));
  const AuthKey key{std::string(reinterpret_cast<const char*>(blobs[0].key), sizeof blobs[0].key)};
  rcnResult_t res = rcnSuccess;
  for (int r = 0; r < nranks && res == rcnSuccess; ++r)
    if (!blobs[size_t(r)].ok) {
      *why = std::string(wire_) + " wire: rank " + std::to_string(r) + " could not listen for its exit watch";
      res = rcnSystemError;
    }
  // Connect to every higher rank (their listening sockets exist already, so
  // this completes through the backlog), then accept every lower one.
  for (int r = rank_ + 1; r < nranks && res == rcnSuccess; ++r) {
    const Deadline deadline = deadlineAfterMs(int64_t(timeoutMs));
    const LinkHello hello{rank_};
    std::string reason;
    if (socketConnect(blobs[size_t(r)].addr, deadline, &fds_[size_t(r)], &reason) != rcnSuccess ||
        authConnect(fds_[size_t(r)], key, kLinkContext, &hello, sizeof hello, deadline, &reason) != rcnSuccess) {
      *why = std::string(wire_) + " wire: rank " + std::to_string(rank_) + " could not open its exit watch to rank " +
             std::to_string(r) + " at " + blobs[size_t(r)].addr.text() + ": " + reason;
      res = rcnRemoteError;
    }
  }
  if (res == rcnSuccess) res = acceptFromLower(listenFd, key, timeoutMs, why);
  socketClose(&listenFd);
  if (res != rcnSuccess) closeAll();
  return res;
}

rcnResult_t PeerLinkWatch::acceptFromLower(int listenFd, const AuthKey& key, uint64_t timeoutMs, std::string* why) {
  const Deadline deadline = deadlineAfterMs(int64_t(timeoutMs));
  AuthListener listener({listenFd}, key, kLinkContext, sizeof(LinkHello),
                        std::string(wire_) + " wire rank " + std::to_string(rank_) + "'s exit watch");
  for (int missing = rank_; missing > 0;) {
    int fd = -1;
    std::string reason;
    LinkHello hello{};
    if (listener.next(deadline, &fd, &hello, &reason) != rcnSuccess) {
      *why = std::string(wire_) + " wire: rank " + std::to_string(rank_) + " waited for " + std::to_string(missing) +
             " lower rank(s) to open their exit watch: " + reason;
      return rcnRemoteError;
    }
    if (!awaitedLowerRank(hello.rank, rank_, fds_)) {
      RCN_WARN(RCN_LOG_TRANSPORT, "%s wire: rank %d dropped an exit watch connection from rank %d, out of place", wire_,
               rank_, hello.rank);
      socketClose(&fd);
      continue;
    }
    fds_[size_t(hello.rank)] = fd;
    --missing;
  }
  return rcnSuccess;
}

// Notes the connections that closed since the last look (nothing is ever
// sent on them: readable means closed).
void PeerLinkWatch::noteClosed(std::chrono::steady_clock::time_point now) {
  std::vector<pollfd> polls;
  for (int fd : fds_)
    if (fd >= 0) polls.push_back(pollfd{fd, POLLIN, 0});
  if (polls.empty() || poll(polls.data(), nfds_t(polls.size()), 0) <= 0) return;
  for (const pollfd& p : polls) {
    if (!p.revents) continue;
    char byte;
    const ssize_t got = recv(p.fd, &byte, 1, MSG_DONTWAIT);
    if (got > 0 || (got < 0 && (errno == EAGAIN || errno == EINTR))) continue;
    size_t peer = 0;
    while (fds_[peer] != p.fd) ++peer;
    socketClose(&fds_[peer]);
    closedAt_[peer] = now;
  }
}

std::string PeerLinkWatch::check(const std::function<bool(int)>& leftOnPurpose) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(1)) return "";
  last_ = now;
  noteClosed(now);
  for (size_t peer = 0; peer < closedAt_.size(); ++peer) {
    if (closedAt_[peer] == std::chrono::steady_clock::time_point{}) continue;
    if (leftOnPurpose && leftOnPurpose(int(peer))) {
      closedAt_[peer] = {};  // no longer watched
      continue;
    }
    if (now - closedAt_[peer] < std::chrono::milliseconds(kGoodbyeGraceMs)) continue;
    closedAt_[peer] = {};
    return std::string(wire_) + " wire: rank " + std::to_string(peer) +
           " exited without destroying or aborting its communicator (its process ended: the connection of its exit "
           "watch to rank " +
           std::to_string(rank_) + " closed)";
  }
  return "";
}

void PeerLinkWatch::closeAll() {
  for (int& fd : fds_) socketClose(&fd);
}

}  // namespace rcn
