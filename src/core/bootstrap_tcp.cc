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
#include "core/bootstrap_wire.h"
#include "core/check.h"
#include "core/params.h"
#include "core/socket.h"

namespace rcn {

namespace {

// Which protocol a proof is for (core/auth.h): one for the root, one for the ring.
constexpr const char* kRootContext = "bootstrap-root";
constexpr const char* kRingContext = "bootstrap-ring";

AuthKey keyOf(const BootstrapHandle& handle) {
  return AuthKey{std::string(reinterpret_cast<const char*>(handle.secret), sizeof handle.secret)};
}

// ---- The root -------------------------------------------------------------------

class Root {
 public:
  Root(int listenFd, const AuthKey& key, int64_t timeoutMs)
      : listenFd_(listenFd),
        listener_({listenFd}, key, kRootContext, sizeof(JoinRequest), "bootstrap root"),
        timeoutMs_(timeoutMs),
        table_(timeoutMs) {}

  // Serves one group, then closes every socket.
  void run();

 private:
  bool gather();
  void sendTable();
  void sendVerdictToAll();
  void rejectLatecomers(Deadline deadline);
  void reply(int fd, const void* extra, size_t extraBytes, Deadline deadline);
  void closeJoiners();

  int listenFd_;
  AuthListener listener_;  // hands out only connections that proved the id's secret
  int64_t timeoutMs_;
  JoinTable table_;  // what the joiners asked for, and the verdict
  std::vector<int> joinerFds_;
};

void Root::run() {
  if (gather()) {
    sendTable();
  } else {
    table_.expire();
    sendVerdictToAll();
  }
  closeJoiners();
  socketClose(&listenFd_);
}

void Root::closeJoiners() {
  for (int& fd : joinerFds_) socketClose(&fd);
  joinerFds_.clear();
}

// Accepts joiners until all ranks are in (true), the deadline passes or the
// group turns out inconsistent (false, with the table's verdict saying why).
bool Root::gather() {
  // An unused id costs one idle thread; it gives up after a long bound. Once
  // the first rank arrives (one that proved the id's secret: a port probe
  // or another run's rank is no start), the others have timeoutMs_ to follow.
  Deadline deadline = deadlineAfterMs(10 * timeoutMs_);
  bool started = false;
  while (!table_.complete()) {
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
    joinerFds_.push_back(fd);
    table_.admit(request);
    if (table_.failed()) {
      rejectLatecomers(deadline);
      return false;
    }
  }
  return true;
}

void Root::reply(int fd, const void* extra, size_t extraBytes, Deadline deadline) {
  std::string why;
  rcnResult_t res = socketSendAll(fd, &table_.reply(), sizeof(RootReply), deadline, &why);
  if (res == rcnSuccess && extraBytes > 0) res = socketSendAll(fd, extra, extraBytes, deadline, &why);
  if (res != rcnSuccess) RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap root: could not answer a rank: %s", why.c_str());
}

void Root::sendTable() {
  const std::vector<WireAddress> table = table_.addressTable();
  Deadline deadline = deadlineAfterMs(timeoutMs_);
  for (int fd : joinerFds_) reply(fd, table.data(), table.size() * sizeof(WireAddress), deadline);
  RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap root: all %d ranks joined", table_.nranks());
}

void Root::sendVerdictToAll() {
  Deadline deadline = deadlineAfterMs(std::min<int64_t>(timeoutMs_, 5000));
  const std::vector<char> joined = table_.joinedTrailer();
  for (int fd : joinerFds_) reply(fd, joined.data(), joined.size(), deadline);
}

// After an inconsistency, ranks still arriving get the same verdict until the
// deadline, rather than a refused connection they would retry.
void Root::rejectLatecomers(Deadline deadline) {
  sendVerdictToAll();
  closeJoiners();
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

// Reads what follows a root's failure verdict and logs why this rank gives up.
rcnResult_t reportVerdict(const RootReply& r, int rank, int nranks, int fd, Deadline deadline) {
  std::vector<char> joined(rootReplyTrailerBytes(r, nranks), 0);
  std::string why;
  const bool heard = !joined.empty() && socketRecvAll(fd, joined.data(), joined.size(), deadline, &why) == rcnSuccess;
  const rcnResult_t res = rootVerdictProblem(r, rank, nranks, heard ? &joined : nullptr, &why);
  RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: %s", why.c_str());
  return res;
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
    res = reportVerdict(reply, rank, nranks, fd, answerDeadline);
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
  AuthListener listener({listenFd_}, key_, kRingContext, sizeof(RingHello), "bootstrap rank " + std::to_string(rank_));
  for (;;) {
    int fd = -1;
    std::string why;
    RingHello hello{};
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
  RingHello hello{rank_, 0};
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
  std::string why;
  if (!sameCall(mine, theirs, rank_, prev(), &why)) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: %s", why.c_str());
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
