// SPDX-License-Identifier: BSD-3-Clause
// The authenticated handshake (src/core/auth.h) on its own: a listener on
// loopback and clients in threads. What it must refuse: a wrong key, a proof
// for another protocol, a recorded proof replayed, a listener without the
// key, a peer that is not rocenante; what it must survive: silent
// connections, more of them than it hears at once, heard concurrently.
#include <catch2/catch_test_macros.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/auth.h"
#include "core/socket.h"

using namespace rcn;

namespace {

using Clock = std::chrono::steady_clock;

const AuthKey kKey{"0123456789abcdef0123456789abcdef"};

// A listening socket on 127.0.0.1 at a port the kernel picks.
struct LoopbackListener {
  int fd = -1;
  SocketAddress where;
  LoopbackListener() {
    SocketAddress loopback;
    auto* in = reinterpret_cast<sockaddr_in*>(&loopback.storage);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    loopback.len = sizeof(sockaddr_in);
    REQUIRE(socketListen(loopback, &fd, &where) == rcnSuccess);
  }
  ~LoopbackListener() { socketClose(&fd); }
};

int connectTo(const SocketAddress& where) {
  int fd = -1;
  std::string why;
  REQUIRE(socketConnect(where, deadlineAfterMs(5000), &fd, &why) == rcnSuccess);
  return fd;
}

struct ClientResult {
  rcnResult_t res = rcnInternalError;
  std::string why;
};

// A client in a thread: connects, proves `key` for `context`, sends `request`.
std::thread client(const SocketAddress& where, AuthKey key, const char* context, int32_t request, ClientResult* out) {
  return std::thread([=] {
    int fd = connectTo(where);
    out->res = authConnect(fd, key, context, &request, sizeof request, deadlineAfterMs(5000), &out->why);
    socketClose(&fd);
  });
}

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

namespace {

// One client's handshake with a listener on loopback: what the listener's
// next() returned within waitMs, the request it handed out, its refusals,
// and what the client's authConnect returned.
struct Attempt {
  rcnResult_t heard = rcnInternalError;
  int32_t request = 0;
  int refused = 0;
  bool noDelay = false;  // Nagle off on the connection handed out
  ClientResult client;
};

Attempt attempt(const AuthKey& listenerKey, const AuthKey& clientKey, const char* clientContext, int32_t request,
                int64_t waitMs) {
  LoopbackListener l;
  AuthListener listener({l.fd}, listenerKey, "test", sizeof(int32_t), "test listener");
  Attempt a;
  std::thread c = client(l.where, clientKey, clientContext, request, &a.client);
  int fd = -1;
  std::string why;
  a.heard = listener.next(deadlineAfterMs(waitMs), &fd, &a.request, &why);
  int flag = 0;
  socklen_t flagBytes = sizeof flag;
  a.noDelay = fd >= 0 && getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &flag, &flagBytes) == 0 && flag != 0;
  c.join();
  socketClose(&fd);
  a.refused = listener.refused();
  return a;
}

}  // namespace

TEST_CASE("auth: a client with the key is heard, its request delivered, and the listener proven", "[auth]") {
  const Attempt a = attempt(kKey, kKey, "test", 1234, 5000);
  CHECK(a.heard == rcnSuccess);
  CHECK(a.request == 1234);
  CHECK(a.client.res == rcnSuccess);
  CHECK(a.refused == 0);
  // Without it every small frame on the connection (tcp wire, bootstrap ring)
  // waits for the peer's delayed ACK: 20 ms an all-reduce over the tcp wire.
  CHECK(a.noDelay);
}

TEST_CASE("auth: a wrong key, another protocol's proof or no key are refused, and the client is told", "[auth]") {
  for (const auto& [key, context] :
       {std::pair<AuthKey, const char*>{AuthKey{"another key of 32 bytes........."}, "test"},
        std::pair<AuthKey, const char*>{kKey, "another protocol"},
        std::pair<AuthKey, const char*>{AuthKey{}, "test"}}) {
    const Attempt a = attempt(kKey, key, context, 1, 1000);
    CHECK(a.heard == rcnRemoteError);  // timed out: nothing was handed out
    CHECK(a.client.res == rcnInvalidArgument);
    CHECK(a.client.why.find("refused our proof") != std::string::npos);
    CHECK(a.refused == 1);
  }
}

TEST_CASE("auth: a listener without the key cannot pass for one", "[auth]") {
  // A process squatting on the port (to hand out a forged id) does not hold
  // the key: it cannot check the client's proof, and whatever it answers,
  // the client does not take it for the real listener.
  const Attempt a = attempt(AuthKey{"an impostor's key, 32 bytes....."}, kKey, "test", 1, 1000);
  CHECK(a.heard == rcnRemoteError);
  CHECK(a.client.res != rcnSuccess);
}

TEST_CASE("auth: a peer that answers with its own bytes is not rocenante", "[auth]") {
  LoopbackListener l;
  std::thread server([&] {
    int fd = -1;
    std::string why;
    if (socketAccept(l.fd, deadlineAfterMs(5000), &fd, &why) != rcnSuccess) return;
    const char banner[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
    (void)socketSendAll(fd, banner, sizeof banner, deadlineAfterMs(1000), &why);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    socketClose(&fd);
  });
  int fd = connectTo(l.where);
  std::string why;
  int32_t request = 1;
  CHECK(authConnect(fd, kKey, "test", &request, sizeof request, deadlineAfterMs(2000), &why) == rcnRemoteError);
  CHECK(why.find("does not speak") != std::string::npos);
  socketClose(&fd);
  server.join();
}

TEST_CASE("auth: a recorded proof replayed on a new connection is refused", "[auth]") {
  LoopbackListener l, relay;
  AuthListener listener({l.fd}, kKey, "test", sizeof(int32_t), "test listener");
  // A man in the middle relays an honest client's handshake to the listener
  // and records what the client sent (its proof and request).
  std::vector<uint8_t> recorded(16 + 32 + 4);
  std::thread mitm([&] {
    int from = -1;
    std::string why;
    if (socketAccept(relay.fd, deadlineAfterMs(5000), &from, &why) != rcnSuccess) return;
    int to = connectTo(l.where);
    uint8_t challenge[24], verdict[40];
    if (socketRecvAll(to, challenge, sizeof challenge, deadlineAfterMs(5000), &why) == rcnSuccess &&
        socketSendAll(from, challenge, sizeof challenge, deadlineAfterMs(5000), &why) == rcnSuccess &&
        socketRecvAll(from, recorded.data(), recorded.size(), deadlineAfterMs(5000), &why) == rcnSuccess &&
        socketSendAll(to, recorded.data(), recorded.size(), deadlineAfterMs(5000), &why) == rcnSuccess &&
        socketRecvAll(to, verdict, sizeof verdict, deadlineAfterMs(5000), &why) == rcnSuccess)
      (void)socketSendAll(from, verdict, sizeof verdict, deadlineAfterMs(5000), &why);
    socketClose(&from);
    socketClose(&to);
  });
  ClientResult honest;
  std::thread c = client(relay.where, kKey, "test", 7, &honest);
  int fd = -1;
  int32_t request = 0;
  std::string why;
  REQUIRE(listener.next(deadlineAfterMs(5000), &fd, &request, &why) == rcnSuccess);
  socketClose(&fd);
  c.join();
  mitm.join();
  REQUIRE(honest.res == rcnSuccess);
  REQUIRE(request == 7);
  // The replay: a new connection gets a fresh challenge (once the listener
  // accepts it) and sends the recording.
  uint32_t accepted = 1;
  std::thread replay([&] {
    int r = connectTo(l.where);
    uint8_t challenge[24], verdict[40];
    std::string err;
    if (socketRecvAll(r, challenge, sizeof challenge, deadlineAfterMs(5000), &err) == rcnSuccess &&
        socketSendAll(r, recorded.data(), recorded.size(), deadlineAfterMs(5000), &err) == rcnSuccess &&
        socketRecvAll(r, verdict, sizeof verdict, deadlineAfterMs(5000), &err) == rcnSuccess)
      std::memcpy(&accepted, verdict, sizeof accepted);
    socketClose(&r);
  });
  int got = -1;
  CHECK(listener.next(deadlineAfterMs(1000), &got, &request, &why) == rcnRemoteError);
  replay.join();
  CHECK(got == -1);
  CHECK(accepted == 0);
  CHECK(listener.refused() == 1);
}

TEST_CASE("auth: 300 silent connections, more than are heard at once, do not delay an honest client", "[auth]") {
  LoopbackListener l;
  AuthListener listener({l.fd}, kKey, "test", sizeof(int32_t), "test listener");
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) silent.push_back(connectTo(l.where));
  ClientResult result;
  const auto start = Clock::now();
  std::thread c = client(l.where, kKey, "test", 42, &result);
  int fd = -1;
  int32_t request = 0;
  std::string why;
  REQUIRE(listener.next(deadlineAfterMs(5000), &fd, &request, &why) == rcnSuccess);
  c.join();
  CHECK(msSince(start) < 2000);
  CHECK(request == 42);
  CHECK(result.res == rcnSuccess);
  CHECK(listener.refused() >= 300 - int(kAuthMaxPending));  // the oldest were dropped to make room
  socketClose(&fd);
  for (int& s : silent) socketClose(&s);
}

TEST_CASE("auth: randomBytes fills every byte, differently each time", "[auth]") {
  std::vector<uint8_t> a(4096, 0), b(4096, 0);
  REQUIRE(randomBytes(a.data(), a.size()) == rcnSuccess);
  REQUIRE(randomBytes(b.data(), b.size()) == rcnSuccess);
  CHECK(a != b);
  int zeros = 0;
  for (uint8_t x : a) zeros += x == 0;
  CHECK(zeros < 64);  // 16 expected; all-zero would mean nothing was written
}
