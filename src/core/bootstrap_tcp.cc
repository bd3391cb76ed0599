// SPDX-License-Identifier: BSD-3-Clause
// The TCP bootstrap of the native API (rcnGetUniqueId / rcnCommInitRank).
//
// rcnGetUniqueId opens the root's listening socket and starts a root thread.
// Each rank opens its own listening socket, proves to the root that it holds
// the id's secret (core/auth.h), sends it (rank, nranks, its address), and
// gets back either the table of every rank's address or a verdict saying why
// the group cannot form (duplicate rank, disagreeing sizes, ranks missing at
// the deadline); a connection without the secret gets nothing. The root
// thread then exits: after that, ranks talk only along a ring (each connects
// to rank+1 and accepts rank-1, each connection proving the secret again),
// over which allGather runs in nranks-1 steps.
//
// Every wait is bounded by ROCENANTE_BOOTSTRAP_TIMEOUT_MS. A rank whose
// exchange fails shuts its ring sockets, so its neighbours fail at once
// instead of at their deadline, and so on around the ring.
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/check.h"
#include "core/params.h"
#include "core/socket.h"

namespace rcn {

namespace {

// ---- Messages ------------------------------------------------------------------

struct WireAddress {
  uint32_t len;
  uint8_t bytes[64];
};

struct JoinRequest {
  int32_t rank;
  int32_t nranks;
  WireAddress listen;  // where this rank accepts its ring neighbour
};

enum Verdict : int32_t {
  kVerdictOk = 0,       // followed by nranks WireAddress
  kVerdictTimeout = 2,  // followed by nranks bytes: 1 where that rank joined
  kVerdictSizeMismatch = 3,
  kVerdictDuplicateRank = 4,
};

struct RootReply {
  int32_t verdict;
  int32_t nranks;       // the size the root holds (set by the first joiner)
  int32_t joined;       // how many ranks had joined
  int32_t culprit;      // kVerdictSizeMismatch / kVerdictDuplicateRank: the rank at fault
  int32_t culpritSize;  // kVerdictSizeMismatch: the size that rank gave
  int32_t pad;
  int64_t timeoutMs;    // the root's bound, for messages
};

// The first message on a ring connection (after the proof), so a rank knows who connected.
struct Hello {
  int32_t rank;
  int32_t pad;
};

// Which protocol a proof is for (core/auth.h): one for the root, one for the ring.
constexpr const char* kRootContext = "bootstrap-root";
constexpr const char* kRingContext = "bootstrap-ring";

AuthKey keyOf(const BootstrapHandle& handle) {
  return AuthKey{std::string(reinterpret_cast<const char*>(handle.secret), sizeof handle.secret)};
}

// Sent before each all-gather so ranks that call it out of step, or with
// different sizes, fail with a clear message instead of mixing up bytes.
struct CallHeader {
  uint64_t call;
  uint64_t bytes;
};

WireAddress toWire(const SocketAddress& addr) {
  WireAddress wire{};
  wire.len = addr.len;
  std::memcpy(wire.bytes, &addr.storage, std::min<size_t>(addr.len, sizeof wire.bytes));
  return wire;
}

// False when the bytes cannot be a socket address (a corrupt id or message).
bool fromWire(const uint8_t* bytes, uint32_t len, SocketAddress* addr) {
  if (len != sizeof(sockaddr_in) && len != sizeof(sockaddr_in6)) return false;
  std::memset(&addr->storage, 0, sizeof addr->storage);
  std::memcpy(&addr->storage, bytes, len);
  addr->len = len;
  int family = addr->storage.ss_family;
  return (family == AF_INET && len == sizeof(sockaddr_in)) || (family == AF_INET6 && len == sizeof(sockaddr_in6));
}

// "0,3,7" (the first 32, then "...").
std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size() && i < 32; ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > 32) text += ",...";
  return text;
}

// ---- The root -------------------------------------------------------------------

struct Joiner {
  int fd;
  JoinRequest request;
};

class Root {
 public:
  Root(int listenFd, const AuthKey& key, int64_t timeoutMs)
      : listenFd_(listenFd),
        listener_({listenFd}, key, kRootContext, sizeof(JoinRequest), "bootstrap root"),
        timeoutMs_(timeoutMs) {}

  // Serves one group, then closes every socket.
  void run();

 private:
  bool gather();
  void admit(int fd, const JoinRequest& request);
  void sendTable();
  void sendVerdictToAll();
  void rejectLatecomers(Deadline deadline);
  void reply(int fd, const void* extra, size_t extraBytes, Deadline deadline);

  int listenFd_;
  AuthListener listener_;  // hands out only connections that proved the id's secret
  int64_t timeoutMs_;
  int nranks_ = -1;  // set by the first joiner
  std::vector<Joiner> joiners_;
  std::vector<char> joined_;  // per rank: 1 once it joined
  RootReply verdict_{};       // kVerdictOk until something fails
};

void Root::run() {
  bool complete = gather();
  if (complete) {
    sendTable();
  } else {
    if (verdict_.verdict == kVerdictOk && nranks_ > 0) {
      verdict_.verdict = kVerdictTimeout;
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: only %zu of %d ranks joined within %lld ms", joiners_.size(),
               nranks_, static_cast<long long>(timeoutMs_));
    }
    sendVerdictToAll();
  }
  for (Joiner& j : joiners_) socketClose(&j.fd);
  socketClose(&listenFd_);
}

// Accepts joiners until all nranks are in (true), the deadline passes or the
// group turns out inconsistent (false, with verdict_ set when inconsistent).
bool Root::gather() {
  // An unused id costs one idle thread; it gives up after a long bound. Once
  // the first rank arrives (one that proved the id's secret: a port probe
  // or another run's rank is no start), the others have timeoutMs_ to follow.
  Deadline deadline = deadlineAfterMs(10 * timeoutMs_);
  bool started = false;
  while (nranks_ < 0 || static_cast<int>(joiners_.size()) < nranks_) {
    int fd = -1;
    std::string why;
    JoinRequest request{};
    if (listener_.next(deadline, &fd, &request, &why) != rcnSuccess) {
      if (!started) RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap root: no rank joined; exiting (%s)", why.c_str());
      return false;
    }
    if (!started) {
      deadline = deadlineAfterMs(timeoutMs_);
      started = true;
    }
    admit(fd, request);
    if (verdict_.verdict != kVerdictOk) {
      rejectLatecomers(deadline);
      return false;
    }
  }
  return true;
}

// Checks one request (from a connection that proved the id's secret); keeps
// the joiner, or records why the whole group cannot form.
void Root::admit(int fd, const JoinRequest& request) {
  // A size past kMaxCommRanks (a stray or broken message) allocates nothing.
  const bool sizeOk = request.nranks >= 1 && request.nranks <= kMaxCommRanks;
  if (nranks_ < 0 && sizeOk) {
    nranks_ = request.nranks;
    joined_.assign(static_cast<size_t>(nranks_), 0);
  }
  joiners_.push_back(Joiner{fd, request});
  verdict_.nranks = nranks_;
  verdict_.timeoutMs = timeoutMs_;
  if (!sizeOk) {
    verdict_.verdict = kVerdictSizeMismatch;
    verdict_.culprit = request.rank;
    verdict_.culpritSize = request.nranks;
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: rank %d says the communicator has %d ranks; it may have 1 to %d",
             request.rank, request.nranks, kMaxCommRanks);
  } else if (request.nranks != nranks_ || request.rank < 0 || request.rank >= nranks_) {
    verdict_.verdict = kVerdictSizeMismatch;
    verdict_.culprit = request.rank;
    verdict_.culpritSize = request.nranks;
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: a joiner says it is rank %d of %d; earlier ranks said %d ranks",
             request.rank, request.nranks, nranks_);
  } else if (joined_[request.rank]) {
    verdict_.verdict = kVerdictDuplicateRank;
    verdict_.culprit = request.rank;
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: two processes joined as rank %d", request.rank);
  } else {
    joined_[request.rank] = 1;
  }
  verdict_.joined = static_cast<int32_t>(joiners_.size());
}

void Root::reply(int fd, const void* extra, size_t extraBytes, Deadline deadline) {
  std::string why;
  rcnResult_t res = socketSendAll(fd, &verdict_, sizeof verdict_, deadline, &why);
  if (res == rcnSuccess && extraBytes > 0) res = socketSendAll(fd, extra, extraBytes, deadline, &why);
  if (res != rcnSuccess) RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap root: could not answer a rank: %s", why.c_str());
}

void Root::sendTable() {
  std::vector<WireAddress> table(static_cast<size_t>(nranks_));
  for (const Joiner& j : joiners_) table[j.request.rank] = j.request.listen;
  verdict_.verdict = kVerdictOk;
  verdict_.joined = nranks_;
  Deadline deadline = deadlineAfterMs(timeoutMs_);
  for (Joiner& j : joiners_) reply(j.fd, table.data(), table.size() * sizeof(WireAddress), deadline);
  RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap root: all %d ranks joined", nranks_);
}

void Root::sendVerdictToAll() {
  Deadline deadline = deadlineAfterMs(std::min<int64_t>(timeoutMs_, 5000));
  bool withJoined = verdict_.verdict == kVerdictTimeout && nranks_ > 0;
  for (Joiner& j : joiners_) reply(j.fd, joined_.data(), withJoined ? joined_.size() : 0, deadline);
}

// After an inconsistency, ranks still arriving get the same verdict until the
// deadline, rather than a refused connection they would retry.
void Root::rejectLatecomers(Deadline deadline) {
  sendVerdictToAll();
  for (Joiner& j : joiners_) socketClose(&j.fd);
  joiners_.clear();
  for (;;) {
    int fd = -1;
    std::string why;
    JoinRequest request{};
    if (listener_.next(deadline, &fd, &request, &why) != rcnSuccess) return;
    reply(fd, nullptr, 0, deadlineAfterMs(1000));
    socketClose(&fd);
  }
}

// ---- A rank joining through the root ---------------------------------------------

// Turns a root's failure verdict into the message this rank logs.
rcnResult_t reportVerdict(const RootReply& r, int rank, int nranks, int fd, Deadline deadline,
                          const SocketAddress& root) {
  switch (r.verdict) {
    case kVerdictSizeMismatch:
      RCN_WARN(RCN_LOG_BOOTSTRAP,
               "bootstrap: ranks disagree on the communicator: a joiner said it is rank %d of %d, the first ranks "
               "said %d ranks (rank %d gives up)",
               r.culprit, r.culpritSize, r.nranks, rank);
      return rcnInvalidUsage;
    case kVerdictDuplicateRank:
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: two processes joined as rank %d (rank %d gives up)", r.culprit, rank);
      return rcnInvalidUsage;
    case kVerdictTimeout: {
      // The root only times out a group whose size matches ours.
      std::vector<char> joined(r.nranks == nranks ? static_cast<size_t>(nranks) : 0, 0);
      std::string why;
      std::string missingText = "unknown";
      if (!joined.empty() && socketRecvAll(fd, joined.data(), joined.size(), deadline, &why) == rcnSuccess) {
        std::vector<int> missing;
        for (int i = 0; i < r.nranks; ++i)
          if (!joined[i]) missing.push_back(i);
        missingText = rankList(missing);
      }
      RCN_WARN(RCN_LOG_BOOTSTRAP,
               "bootstrap: only %d of %d ranks joined within %lld ms; missing ranks: %s (rank %d gives up)",
               r.joined, r.nranks, static_cast<long long>(r.timeoutMs), missingText.c_str(), rank);
      return rcnRemoteError;
    }
    default:
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: the root at %s sent an unknown verdict %d", root.text().c_str(),
               r.verdict);
      return rcnRemoteError;
  }
}

// Proves the id's secret to the root, sends our request and receives the
// address table.
rcnResult_t joinRoot(const SocketAddress& root, const AuthKey& key, int rank, int nranks, const SocketAddress& listen,
                     int64_t timeoutMs, std::vector<WireAddress>* table) {
  // The root's window opens when the first rank arrives, so our wait for its
  // answer allows the full window plus slack for the answer to travel.
  const Deadline start = Clock::now();
  Deadline connectDeadline = deadlineAfterMs(timeoutMs);
  Deadline answerDeadline = deadlineAfterMs(timeoutMs + 1000 + timeoutMs / 4);
  int fd = -1;
  std::string why;
  rcnResult_t res = socketConnect(root, connectDeadline, &fd, &why);
  if (res != rcnSuccess) {
    RCN_WARN(RCN_LOG_BOOTSTRAP,
             "bootstrap: rank %d could not reach the root at %s within %lld ms: %s "
             "(is the process that made the id alive, and the id from this run?)",
             rank, root.text().c_str(), static_cast<long long>(timeoutMs), why.c_str());
    return res;
  }
  JoinRequest request{};
  request.rank = rank;
  request.nranks = nranks;
  request.listen = toWire(listen);
  RootReply reply{};
  res = authConnect(fd, key, kRootContext, &request, sizeof request, answerDeadline, &why);
  if (res == rcnInvalidArgument) {
    RCN_WARN(RCN_LOG_BOOTSTRAP,
             "bootstrap: rank %d: the root at %s refused our proof of the id's secret (a unique "
             "id from another run, or one that was changed?)",
             rank, root.text().c_str());
    socketClose(&fd);
    return res;
  }
  if (res == rcnSuccess) res = socketRecvAll(fd, &reply, sizeof reply, answerDeadline, &why);
  if (res != rcnSuccess) {
    long long waitedMs = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d got no answer from the root at %s after %lld ms: %s", rank,
             root.text().c_str(), waitedMs, why.c_str());
    socketClose(&fd);
    return res;
  }
  if (reply.verdict != kVerdictOk) {
    res = reportVerdict(reply, rank, nranks, fd, answerDeadline, root);
    socketClose(&fd);
    return res;
  }
  table->resize(static_cast<size_t>(nranks));
  res = socketRecvAll(fd, table->data(), table->size() * sizeof(WireAddress), answerDeadline, &why);
  socketClose(&fd);
  if (res != rcnSuccess)
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d lost the root while receiving the address table: %s", rank,
             why.c_str());
  return res;
}

// ---- A rank of the ring ----------------------------------------------------------

class TcpBootstrap : public Bootstrap {
 public:
  TcpBootstrap(int rank, int nranks, const AuthKey& key, int64_t timeoutMs)
      : rank_(rank), nranks_(nranks), key_(key), timeoutMs_(timeoutMs) {}
  ~TcpBootstrap() override {
    socketClose(&listenFd_);
    socketClose(&nextFd_);
    socketClose(&prevFd_);
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  rcnResult_t allGather(void* data, size_t bytes) override;
  void abort() override { fail(); }

  rcnResult_t openListen(SocketAddress* where);
  rcnResult_t connectRing(const std::vector<WireAddress>& table);

 private:
  int next() const { return (rank_ + 1) % nranks_; }
  int prev() const { return (rank_ + nranks_ - 1) % nranks_; }
  rcnResult_t connectNext(const std::vector<WireAddress>& table, Deadline deadline);
  rcnResult_t acceptPrev(Deadline deadline);
  rcnResult_t exchange(const void* sendData, void* recvData, size_t bytes, Deadline deadline, const char* what);
  // Shuts the ring sockets (not closing them: another thread may be polling
  // them), so pending and future exchanges, here and at the neighbours, fail.
  void fail() {
    failed_ = true;
    if (nextFd_ >= 0) shutdown(nextFd_, SHUT_RDWR);
    if (prevFd_ >= 0) shutdown(prevFd_, SHUT_RDWR);
  }

  const int rank_;
  const int nranks_;
  const AuthKey key_;  // the id's secret, proved on every ring connection
  const int64_t timeoutMs_;
  int listenFd_ = -1;
  int nextFd_ = -1;  // we send to rank+1
  int prevFd_ = -1;  // we receive from rank-1
  uint64_t calls_ = 0;
  std::atomic<bool> failed_{false};
};

rcnResult_t TcpBootstrap::openListen(SocketAddress* where) {
  SocketAddress addr;
  RCN_CHECK(socketPickListenAddress(&addr));
  RCN_CHECK(socketListen(addr, &listenFd_, where));
  return rcnSuccess;
}

rcnResult_t TcpBootstrap::acceptPrev(Deadline deadline) {
  AuthListener listener({listenFd_}, key_, kRingContext, sizeof(Hello), "bootstrap rank " + std::to_string(rank_));
  for (;;) {
    int fd = -1;
    std::string why;
    Hello hello{};
    rcnResult_t res = listener.next(deadline, &fd, &hello, &why);
    if (res != rcnSuccess) {
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d: rank %d did not connect within %lld ms: %s", rank_, prev(),
               static_cast<long long>(timeoutMs_), why.c_str());
      return res;
    }
    if (hello.rank == prev()) {
      prevFd_ = fd;
      return rcnSuccess;
    }
    // A rank of this run in the wrong place cannot happen with one table; keep waiting.
    RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d ignored a connection from rank %d, not rank %d", rank_, hello.rank,
             prev());
    socketClose(&fd);
  }
}

rcnResult_t TcpBootstrap::connectNext(const std::vector<WireAddress>& table, Deadline deadline) {
  SocketAddress nextAddr;
  if (!fromWire(table[next()].bytes, table[next()].len, &nextAddr)) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d got a corrupt address for rank %d", rank_, next());
    return rcnInternalError;
  }
  std::string why;
  rcnResult_t res = socketConnect(nextAddr, deadline, &nextFd_, &why);
  if (res != rcnSuccess) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d could not connect to rank %d at %s within %lld ms: %s", rank_,
             next(), nextAddr.text().c_str(), static_cast<long long>(timeoutMs_), why.c_str());
    return res;
  }
  Hello hello{rank_, 0};
  res = authConnect(nextFd_, key_, kRingContext, &hello, sizeof hello, deadline, &why);
  if (res != rcnSuccess)
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d could not greet rank %d at %s: %s", rank_, next(),
             nextAddr.text().c_str(), why.c_str());
  return res;
}

rcnResult_t TcpBootstrap::connectRing(const std::vector<WireAddress>& table) {
  if (nranks_ > 1) {
    // Both at once: the greeting to rank+1 waits for rank+1 to hear it, while
    // rank+1 greets rank+2, and so on around the ring.
    Deadline deadline = deadlineAfterMs(timeoutMs_);
    rcnResult_t accepted = rcnInternalError;
    std::thread acceptor;
    try {
      acceptor = std::thread([&] { accepted = acceptPrev(deadline); });
    } catch (const std::exception& e) {
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d cannot start a thread: %s", rank_, e.what());
      return rcnSystemError;
    }
    rcnResult_t connected = connectNext(table, deadline);
    // This rank gives up: rank-1 need not wait for it until the deadline.
    if (connected != rcnSuccess) shutdown(listenFd_, SHUT_RDWR);
    acceptor.join();
    RCN_CHECK(connected);
    RCN_CHECK(accepted);
  }
  socketClose(&listenFd_);
  RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d of %d connected", rank_, nranks_);
  return rcnSuccess;
}

// One ring step: send to rank+1 while receiving from rank-1.
rcnResult_t TcpBootstrap::exchange(const void* sendData, void* recvData, size_t bytes, Deadline deadline,
                                   const char* what) {
  std::string why;
  char side = 0;
  rcnResult_t res = socketSendRecv(nextFd_, sendData, prevFd_, recvData, bytes, deadline, &why, &side);
  if (res == rcnSuccess) return rcnSuccess;
  int peer = side == 's' ? next() : prev();
  if (failed_)  // abort() shut the sockets under us
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d: %s stopped: the communicator was aborted", rank_, what);
  else if (why == "timed out")
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d: %s with rank %d timed out after %lld ms", rank_, what, peer,
             static_cast<long long>(timeoutMs_));
  else
    RCN_WARN(RCN_LOG_BOOTSTRAP,
             "bootstrap: rank %d: %s with rank %d failed: %s (rank %d exited, aborted, or lost its own neighbour)",
             rank_, what, peer, why.c_str(), peer);
  fail();
  return res;
}

rcnResult_t TcpBootstrap::allGather(void* data, size_t bytes) {
  RCN_ARG_CHECK(data != nullptr || bytes == 0, "bootstrap: allGather of %zu bytes with a null buffer", bytes);
  if (failed_) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d: an earlier exchange failed or the communicator was aborted",
             rank_);
    return rcnRemoteError;
  }
  if (nranks_ == 1) return rcnSuccess;
  Deadline deadline = deadlineAfterMs(timeoutMs_);
  CallHeader mine{++calls_, bytes};
  CallHeader theirs{};
  RCN_CHECK(exchange(&mine, &theirs, sizeof mine, deadline, "the all-gather header exchange"));
  if (theirs.call != mine.call || theirs.bytes != mine.bytes) {
    RCN_WARN(RCN_LOG_BOOTSTRAP,
             "bootstrap: rank %d is in all-gather #%llu of %zu bytes, but rank %d is in all-gather #%llu of %llu bytes",
             rank_, static_cast<unsigned long long>(mine.call), bytes, prev(),
             static_cast<unsigned long long>(theirs.call), static_cast<unsigned long long>(theirs.bytes));
    fail();
    return rcnInvalidUsage;
  }
  char* blocks = static_cast<char*>(data);
  for (int step = 0; step < nranks_ - 1; ++step) {
    size_t sendBlock = static_cast<size_t>((rank_ - step + nranks_) % nranks_);
    size_t recvBlock = static_cast<size_t>((rank_ - step - 1 + nranks_) % nranks_);
    RCN_CHECK(exchange(blocks + sendBlock * bytes, blocks + recvBlock * bytes, bytes, deadline, "all-gather"));
  }
  return rcnSuccess;
}

}  // namespace

// ---- Entry points -------------------------------------------------------------------

rcnResult_t bootstrapGetUniqueId(rcnUniqueId* id) {
  RCN_ARG_CHECK(id != nullptr, "bootstrap: rcnGetUniqueId needs a non-null id");
  BootstrapHandle handle{};
  RCN_CHECK(randomBytes(handle.secret, sizeof handle.secret));
  SocketAddress addr;
  SocketAddress bound;
  int listenFd = -1;
  RCN_CHECK(socketPickListenAddress(&addr));
  RCN_CHECK(socketListen(addr, &listenFd, &bound));

  int64_t timeoutMs = bootstrapTimeoutMs();
  try {
    const AuthKey key = keyOf(handle);
    std::thread([listenFd, key, timeoutMs] { Root(listenFd, key, timeoutMs).run(); }).detach();
  } catch (const std::exception& e) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: cannot start the root thread: %s", e.what());
    socketClose(&listenFd);
    return rcnSystemError;
  }

  std::memcpy(handle.addr, &bound.storage, bound.len);
  handle.addrLen = bound.len;
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, &handle, sizeof handle);
  RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: root listening on %s", bound.text().c_str());
  return rcnSuccess;
}

rcnResult_t bootstrapInitTcp(const rcnUniqueId& id, int rank, int nranks, std::unique_ptr<Bootstrap>* out) {
  RCN_ARG_CHECK(out != nullptr, "bootstrap: null output pointer");
  RCN_ARG_CHECK(nranks >= 1, "bootstrap: nranks must be at least 1, got %d", nranks);
  RCN_ARG_CHECK(rank >= 0 && rank < nranks, "bootstrap: rank %d is outside 0..%d", rank, nranks - 1);
  BootstrapHandle handle;
  std::memcpy(&handle, id.internal, sizeof handle);
  SocketAddress root;
  RCN_ARG_CHECK(fromWire(handle.addr, handle.addrLen, &root),
                "bootstrap: the unique id holds no valid root address (was it made by rcnGetUniqueId?)");

  int64_t timeoutMs = bootstrapTimeoutMs();
  auto boot = std::make_unique<TcpBootstrap>(rank, nranks, keyOf(handle), timeoutMs);
  SocketAddress listen;  // left empty for a single rank: it has no neighbour
  if (nranks > 1) RCN_CHECK(boot->openListen(&listen));
  std::vector<WireAddress> table;
  RCN_CHECK(joinRoot(root, keyOf(handle), rank, nranks, listen, timeoutMs, &table));
  RCN_CHECK(boot->connectRing(table));
  *out = std::move(boot);
  return rcnSuccess;
}

}  // namespace rcn
