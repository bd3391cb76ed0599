// SPDX-License-Identifier: BSD-3-Clause
// The tcp wire: any hosts, one connection per peer. A put is a framed write
// (header with the remote offset and length, then the payload); a flag is a
// small frame after it on the same connection, so TCP's in-order delivery
// gives the payload-before-flag guarantee. A receiver thread per rank applies
// frames to the local region only after checking every offset and length
// against it: a bad frame is this rank's error, and by closing every
// connection it becomes every peer's error too, with no waiting. Before it
// closes, a failing rank tells every peer why in an ABORT frame, so that a
// peer blames the rank that failed first, not the one that passed it on.
// Every connection first proves rank 0's random key (core/auth.h), learnt
// only through the bootstrap, so a stranger cannot connect as a peer.
#include "transport/wire/tcp_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/check.h"
#include "core/deadline.h"
#include "core/socket.h"
#include "transport/wire/peer_identity.h"
#include "transport/wire/tcp_frame.h"
#include "transport/wire/wire.h"

namespace rcn {

std::atomic<int> gTcpWireCorruptFrames{0};
std::atomic<int> gTcpWireStallFrames{0};

namespace {

// How long a failing rank waits for another thread's frame to finish
// before it gives up telling that peer why.
constexpr int kAbortLockMs = 100;

// What each connection proves (core/auth.h): rank 0's random key, which
// only the communicator's ranks learn (through the bootstrap).
constexpr const char* kWireContext = "tcp-wire";

struct TcpBlob {
  uint8_t key[kIdSecretBytes];  // rank 0's is the communicator's
  SocketAddress addr;
  int32_t listening;
};

// Setup uses the core socket helpers (non-blocking, deadlines); the data path
// then uses blocking sockets whose send/receive timeouts bound every wait.
void makeBlocking(int fd, uint64_t timeoutMs) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv;
  tv.tv_sec = time_t(timeoutMs / 1000);
  tv.tv_usec = suseconds_t((timeoutMs % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// Reads exactly n bytes; false on EOF, error or the socket's receive
// timeout, with *stalled set for the timeout (a sender stopped mid-frame).
bool readFully(int fd, void* data, size_t n, bool* stalled = nullptr) {
  uint8_t* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    ssize_t got = recv(fd, p, n, 0);
    if (got > 0) {
      p += got;
      n -= size_t(got);
    } else if (got < 0 && errno == EINTR) {
      continue;
    } else {
      if (stalled) *stalled = got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      return false;
    }
  }
  return true;
}

// Writes every byte of the iovecs; false on error or the send timeout.
bool writeFully(int fd, iovec* iov, int count) {
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(count);
    ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    size_t left = size_t(sent);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

// ---- the wire ----------------------------------------------------------------

class TcpWire final : public Wire {
 public:
  ~TcpWire() override {
    abort();
    if (receiver_.joinable()) receiver_.join();
    for (int fd : fds_) if (fd >= 0) ::close(fd);
    if (listenFd_ >= 0) ::close(listenFd_);
    if (base_) munmap(base_, layout_.regionBytes);
  }

  const char* name() const override { return "tcp"; }
  uint8_t* region() const override { return base_; }

  rcnResult_t setup(const FastPathContext& ctx, const WireLayout& layout, std::string* why);

  rcnResult_t put(int peer, size_t localOffset, size_t remoteOffset, size_t bytes) override {
    RCN_CHECK(checkPut(peer, localOffset, remoteOffset, bytes));
    FrameHeader h{kFrameMagic, kFrameData, remoteOffset, bytes};
    if (gTcpWireCorruptFrames.load() > 0 && gTcpWireCorruptFrames.fetch_sub(1) > 0)
      h.offset = layout_.regionBytes + 4096;  // testing aid: a frame the receiver must refuse
    iovec iov[2] = {{&h, sizeof h}, {base_ + localOffset, bytes}};
    if (bytes && gTcpWireStallFrames.load() > 0 && gTcpWireStallFrames.fetch_sub(1) > 0)
      return stallMidFrame(peer, iov);
    return send(peer, iov, bytes ? 2 : 1);
  }

  rcnResult_t putFlag(int peer, size_t flagIndex, uint32_t value) override {
    RCN_CHECK(checkPutFlag(peer, flagIndex));
    FrameHeader h{kFrameMagic, kFrameFlag, flagIndex, value};
    iovec iov[1] = {{&h, sizeof h}};
    return send(peer, iov, 1);
  }

  rcnResult_t progress() override { return failure_.failed() ? rcnRemoteError : rcnSuccess; }

  rcnResult_t error(std::string* why) const override { return failure_.get(why); }

  // Shutting the sockets down wakes the receiver thread and makes every peer
  // see a closed connection, which is how a failure here reaches them.
  void abort() override {
    // A failure being told to the peers finishes first: another thread that
    // saw it (a put refused, a wait that read progress()) aborts at once, and
    // shutting the sockets under the ABORT frames would leave the peers only
    // the close, blaming this rank.
    std::lock_guard<std::mutex> telling(tellMutex_);
    if (stopping_.exchange(true)) return;
    for (int fd : fds_) if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }

  void abortWith(const std::string& why) override { fail(why, /*logged=*/true); }

  bool peerLeft(int peer) const override { return peer >= 0 && peer < nranks_ && byeFrom_[peer].load(); }

  // BYE, then a half-close, then read until every peer said BYE too (briefly):
  // closing with unread bytes would reset a peer's connection before it read ours.
  void close() override {
    if (stopping_.load()) return;
    closing_.store(true);
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_ || fds_[r] < 0) continue;
      FrameHeader h{kFrameMagic, kFrameBye, 0, 0};
      iovec iov[1] = {{&h, sizeof h}};
      std::lock_guard<std::timed_mutex> lock(sendLocks_[r]);
      if (writeFully(fds_[r], iov, 1)) shutdown(fds_[r], SHUT_WR);
    }
    // A failure shut every connection: no more goodbyes will come.
    (void)pollUntil(closeDeadline(timeoutMs_), std::chrono::milliseconds(1),
                    [this] { return allPeersSaidBye() || failure_.failed(); });
    abort();
  }

 private:
  bool stopped() const override { return failure_.failed() || stopping_.load(std::memory_order_acquire); }

  rcnResult_t send(int peer, iovec* iov, int count) {
    std::unique_lock<std::timed_mutex> lock(sendLocks_[peer]);
    if (writeFully(fds_[peer], iov, count)) return rcnSuccess;
    const int err = errno;
    lock.unlock();
    if (stopping_.load(std::memory_order_acquire)) return rcnRemoteError;  // our own abort shut it: no news
    // The peer may have said why it closed (an ABORT frame naming the rank
    // that failed, a BYE) in frames the receiver has not applied yet: give it
    // a moment, so that the reason recorded is that one, not this broken pipe.
    (void)pollUntil(deadlineAfterMs(100), std::chrono::milliseconds(1),
                    [this, peer] { return failure_.failed() || byeFrom_[peer].load(); });
    if (failure_.failed()) return rcnRemoteError;
    fail("tcp wire: rank " + std::to_string(rank_) + " lost its connection to rank " + std::to_string(peer) +
         (byeFrom_[peer].load() ? ", which had destroyed its communicator" : " (" + std::string(strerror(err)) + ")"));
    return rcnRemoteError;
  }

  // Testing aid (gTcpWireStallFrames): half the frame, then silence on this
  // connection until the wire fails (bounded by twice the timeout).
  rcnResult_t stallMidFrame(int peer, iovec* iov) {
    std::lock_guard<std::timed_mutex> lock(sendLocks_[peer]);
    iov[1].iov_len /= 2;
    if (writeFully(fds_[peer], iov, 2))
      (void)pollUntil(deadlineAfterMs(int64_t(2 * timeoutMs_)), std::chrono::milliseconds(1),
                      [this] { return stopped(); });
    return rcnRemoteError;
  }

  // The first failure also shuts the sockets, so every peer sees it, after
  // telling them why.
  void fail(const std::string& text, bool logged = false) {
    std::unique_lock<std::mutex> telling(tellMutex_);
    if (!failure_.record(text, logged)) return;
    tellPeers(text);
    telling.unlock();
    abort();
  }

  // Best effort, and never blocking for long: a peer whose connection
  // another thread keeps busy past kAbortLockMs, or whose buffer is full,
  // only sees the close. A connection the frame went out on only in part is
  // shut before its lock is let go, so no later frame follows the piece.
  void tellPeers(const std::string& text) {
    const std::string cut = text.substr(0, kAbortTextBytes);
    FrameHeader h{kFrameMagic, kFrameAbort, 0, cut.size()};
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_ || fds_[r] < 0) continue;
      std::unique_lock<std::timed_mutex> lock(sendLocks_[r], std::chrono::milliseconds(kAbortLockMs));
      if (!lock.owns_lock()) continue;
      iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(cut.data()), cut.size()}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      if (sendmsg(fds_[r], &msg, MSG_NOSIGNAL | MSG_DONTWAIT) != ssize_t(sizeof h + cut.size()))
        shutdown(fds_[r], SHUT_RDWR);
    }
  }

  bool allPeersSaidBye() const {
    for (int r = 0; r < nranks_; ++r)
      if (r != rank_ && !byeFrom_[r].load()) return false;
    return true;
  }

  rcnResult_t listenLocal(std::string* why);
  rcnResult_t connectTo(int peer, const TcpBlob& blob, const AuthKey& key, std::string* why);
  rcnResult_t acceptFrom(const AuthKey& key, int count, std::string* why);
  void receiveLoop();
  bool applyFrame(int peer);

  uint64_t timeoutMs_ = 10000;
  uint8_t* base_ = nullptr;
  int listenFd_ = -1;
  SocketAddress listenAddr_;
  std::vector<int> fds_;
  std::unique_ptr<std::timed_mutex[]> sendLocks_;  // one writer a connection at a time: frames never interleave
  std::unique_ptr<std::atomic<bool>[]> byeFrom_;
  std::thread receiver_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> closing_{false};  // close() began: goodbyes sent
  std::mutex tellMutex_;  // a failure's record and ABORT frames, before any abort() shuts the sockets
  WireFailure failure_;
};

rcnResult_t TcpWire::listenLocal(std::string* why) {
  SocketAddress addr;
  if (socketPickListenAddress(&addr) != rcnSuccess ||
      socketListen(addr, &listenFd_, &listenAddr_) != rcnSuccess) {
    *why = "tcp wire: rank " + std::to_string(rank_) + " could not open a listening socket";
    return rcnSystemError;
  }
  return rcnSuccess;
}

// Lower ranks connect to higher ranks; the listen socket already exists on
// every rank (it was opened before the blobs were exchanged), so connect
// completes without the peer being in accept() yet.
rcnResult_t TcpWire::connectTo(int peer, const TcpBlob& blob, const AuthKey& key, std::string* why) {
  Deadline deadline = deadlineAfterMs(int64_t(timeoutMs_));
  std::string reason;
  TcpHello hello{rank_, 0};
  int fd = -1;
  if (socketConnect(blob.addr, deadline, &fd, &reason) != rcnSuccess ||
      authConnect(fd, key, kWireContext, &hello, sizeof hello, deadline, &reason) != rcnSuccess) {
    socketClose(&fd);
    *why = "tcp wire: rank " + std::to_string(rank_) + " could not connect to rank " +
           std::to_string(peer) + " at " + blob.addr.text() + ": " + reason;
    return rcnRemoteError;
  }
  makeBlocking(fd, timeoutMs_);
  fds_[peer] = fd;
  return rcnSuccess;
}

rcnResult_t TcpWire::acceptFrom(const AuthKey& key, int count, std::string* why) {
  Deadline deadline = deadlineAfterMs(int64_t(timeoutMs_));
  AuthListener listener({listenFd_}, key, kWireContext, sizeof(TcpHello), "tcp wire rank " + std::to_string(rank_));
  while (count > 0) {
    std::string reason;
    int fd = -1;
    TcpHello hello{};
    if (listener.next(deadline, &fd, &hello, &reason) != rcnSuccess) {
      *why = "tcp wire: rank " + std::to_string(rank_) + " waited for " + std::to_string(count) +
             " lower rank(s) to connect: " + reason;
      return rcnRemoteError;
    }
    if (!helloAcceptable(hello, rank_, fds_, &reason)) {
      // A rank of this communicator out of place: a bug, not a stranger.
      RCN_WARN(RCN_LOG_TRANSPORT, "%s", reason.c_str());
      socketClose(&fd);
      continue;
    }
    makeBlocking(fd, timeoutMs_);
    fds_[hello.rank] = fd;
    --count;
  }
  return rcnSuccess;
}

// Applies one frame from peer. False ends this connection (EOF, error, BYE
// handled by the caller through byeFrom_).
bool TcpWire::applyFrame(int peer) {
  FrameHeader h;
  if (!readFully(fds_[peer], &h, sizeof h)) {
    if (!byeFrom_[peer].load() && !stopping_.load())
      fail("tcp wire: rank " + std::to_string(peer) + " closed its connection to rank " +
           std::to_string(rank_) + " (peer failed or exited)");
    return false;
  }
  std::string bad;
  bool stalled = false;
  const FrameJudgement judged = judgeFrame(h, layout_);
  switch (judged.action) {
    case FrameAction::kPayload:
      if (h.length && !readFully(fds_[peer], base_ + h.offset, h.length, &stalled))
        bad = stalled ? "payload stalled for " + std::to_string(timeoutMs_) + " ms: the sender stopped mid-frame"
                      : "truncated payload";
      break;
    case FrameAction::kFlag: __atomic_store_n(&flags()[h.offset], uint32_t(h.length), __ATOMIC_RELEASE); break;
    case FrameAction::kBye: byeFrom_[peer].store(true); return false;
    case FrameAction::kAbortText: {
      std::string text(size_t(h.length), '\0');
      if (!readFully(fds_[peer], text.data(), text.size())) text = "(its reason was cut off)";
      // A rank that is leaving (its BYE sent) no longer needs anyone: a peer's
      // failure then is not this rank's error.
      if (!closing_.load()) fail("tcp wire: rank " + std::to_string(peer) + " failed: " + text);
      return false;
    }
    case FrameAction::kRefuse: bad = judged.bad; break;
  }
  if (bad.empty()) return true;
  fail(refusedFrameText(rank_, peer, bad.c_str(), h));
  return false;
}

void TcpWire::receiveLoop() {
  std::vector<bool> open(nranks_, true);
  open[rank_] = false;
  std::vector<pollfd> fds;
  std::vector<int> who;
  while (!stopping_.load(std::memory_order_acquire)) {
    fds.clear();
    who.clear();
    for (int r = 0; r < nranks_; ++r) {
      if (!open[r]) continue;
      fds.push_back({fds_[r], POLLIN, 0});
      who.push_back(r);
    }
    if (fds.empty()) return;
    int ready = poll(fds.data(), fds.size(), 20);
    if (ready <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      // Drain what is there, so a burst of frames is applied in one wakeup.
      do {
        if (!applyFrame(who[i])) {
          open[who[i]] = false;
          break;
        }
        pollfd again{fds[i].fd, POLLIN, 0};
        if (poll(&again, 1, 0) <= 0) break;
      } while (!stopping_.load(std::memory_order_acquire));
    }
  }
}

rcnResult_t TcpWire::setup(const FastPathContext& ctx, const WireLayout& layout, std::string* why) {
  rank_ = ctx.rank;
  nranks_ = ctx.nranks;
  layout_ = layout;
  timeoutMs_ = ctx.timeoutMs ? ctx.timeoutMs : 10000;
  fds_.assign(nranks_, -1);
  sendLocks_.reset(new std::timed_mutex[nranks_]);
  byeFrom_.reset(new std::atomic<bool>[nranks_]);
  for (int r = 0; r < nranks_; ++r) byeFrom_[r].store(false);
  void* base = mmap(nullptr, layout_.regionBytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    *why = std::string("tcp wire: allocating the region failed: ") + strerror(errno);
    return rcnSystemError;
  }
  base_ = static_cast<uint8_t*>(base);

  std::vector<TcpBlob> blobs(nranks_);
  bool listening = listenLocal(why) == rcnSuccess;
  RCN_CHECK(randomBytes(blobs[rank_].key, sizeof blobs[rank_].key));
  blobs[rank_].addr = listenAddr_;
  blobs[rank_].listening = listening ? 1 : 0;
  RCN_CHECK(ctx.bootstrap->allGather(blobs.data(), sizeof(TcpBlob)));
  for (int r = 0; r < nranks_; ++r) {
    if (!blobs[r].listening) {
      if (listening) *why = "tcp wire: rank " + std::to_string(r) + " could not open a listening socket";
      return rcnSystemError;
    }
    // Every rank sees the same blobs, so every rank fails alike.
    if (!peerAddressUsable(blobs[r].addr)) {
      *why = "tcp wire: rank " + std::to_string(r) + " sent a listen address that is no socket address";
      return rcnRemoteError;
    }
  }
  const AuthKey key{std::string(reinterpret_cast<const char*>(blobs[0].key), sizeof blobs[0].key)};
  for (int r = rank_ + 1; r < nranks_; ++r) RCN_CHECK(connectTo(r, blobs[r], key, why));
  RCN_CHECK(acceptFrom(key, rank_, why));
  socketClose(&listenFd_);
  receiver_ = std::thread([this] { receiveLoop(); });
  return rcnSuccess;
}

}  // namespace

rcnResult_t createTcpWire(const FastPathContext& ctx, const WireLayout& layout,
                          std::unique_ptr<Wire>* out, std::string* why) {
  auto wire = std::make_unique<TcpWire>();
  rcnResult_t res = wire->setup(ctx, layout, why);
  if (res != rcnSuccess) {
    // Steps that fail inside the bootstrap leave why empty; their warning is the reason.
    if (why->empty()) *why = "tcp wire: rank " + std::to_string(ctx.rank) + ": setup failed: " + lastErrorText();
    RCN_WARN(RCN_LOG_TRANSPORT, "%s", why->c_str());
    return res;
  }
  RCN_INFO(RCN_LOG_TRANSPORT, "tcp wire: rank %d connected to %d peers", ctx.rank, ctx.nranks - 1);
  *out = std::move(wire);
  return rcnSuccess;
}

}  // namespace rcn
