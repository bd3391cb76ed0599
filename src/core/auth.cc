// SPDX-License-Identifier: BSD-3-Clause
// The handshake (auth.h), three messages on a fresh connection:
//   listener -> client  Challenge {protocol, listener nonce}
//   client -> listener  Response  {client nonce, MAC("client")} + request
//   listener -> client  Verdict   {accepted, MAC("listener")}
// MAC(role) = HMAC-SHA256(key, label | context | role | listener nonce |
// client nonce). Both nonces are fresh random bytes, so a recorded proof is
// worthless on another connection; the role and context keep a proof from
// being reflected back or replayed in another protocol.
//
// HMAC-SHA256 and the constant-time comparison come from OpenSSL's libcrypto
// (present wherever Python or PyTorch runs; hand-writing SHA-256 is what a
// well-kept library is for), random bytes from getrandom(2).
#include "core/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "core/log.h"
#include "core/socket.h"

namespace rcn {

namespace {

constexpr uint64_t kAuthProtocol = 0x31485455414e4352ull;  // "RCNAUTH1"
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 32;
constexpr const char* kLabel = "rocenante-auth-1";

struct Challenge {
  uint64_t protocol;
  uint8_t nonce[kNonceBytes];
};

struct Response {
  uint8_t nonce[kNonceBytes];
  uint8_t mac[kMacBytes];
};

struct Verdict {
  uint32_t accepted;  // 1: the client's proof held; mac follows
  uint32_t pad;
  uint8_t mac[kMacBytes];
};

// The proof of `role` ('C' client, 'L' listener) for one pair of nonces.
bool computeMac(const AuthKey& key, const std::string& context, char role, const uint8_t* listenerNonce,
                const uint8_t* clientNonce, uint8_t mac[kMacBytes]) {
  std::string message = kLabel;
  message += '\0';
  message += context;
  message += '\0';
  message += role;
  message.append(reinterpret_cast<const char*>(listenerNonce), kNonceBytes);
  message.append(reinterpret_cast<const char*>(clientNonce), kNonceBytes);
  // A key of length 0 is HMAC's empty key; OpenSSL wants a non-null pointer for it.
  static const unsigned char kNoKey = 0;
  const void* keyData = key.bytes.empty() ? static_cast<const void*>(&kNoKey) : key.bytes.data();
  unsigned int length = 0;
  return HMAC(EVP_sha256(), keyData, static_cast<int>(key.bytes.size()),
              reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &length) != nullptr &&
         length == kMacBytes;
}

bool macMatches(const AuthKey& key, const std::string& context, char role, const uint8_t* listenerNonce,
                const uint8_t* clientNonce, const uint8_t* mac) {
  uint8_t expected[kMacBytes];
  return computeMac(key, context, role, listenerNonce, clientNonce, expected) &&
         CRYPTO_memcmp(expected, mac, kMacBytes) == 0;
}

}  // namespace

rcnResult_t randomBytes(void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    const ssize_t n = getrandom(p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    RCN_SYS_CHECK(n < 0 ? -1 : 0, "getrandom");
    p += n;
    bytes -= size_t(n);
  }
  return rcnSuccess;
}

// ---- The client ----------------------------------------------------------------

rcnResult_t authConnect(int fd, const AuthKey& key, const char* context, const void* request, size_t requestBytes,
                        Deadline deadline, std::string* why) {
  Challenge challenge{};
  RCN_CHECK(socketRecvAll(fd, &challenge, sizeof challenge, deadline, why));
  if (challenge.protocol != kAuthProtocol) {
    *why =
        "what answers there does not speak rocenante's authenticated bootstrap (another service, or an older "
        "rocenante)";
    return rcnRemoteError;
  }
  std::vector<uint8_t> message(sizeof(Response) + requestBytes);
  Response response{};
  RCN_CHECK(randomBytes(response.nonce, sizeof response.nonce));
  if (!computeMac(key, context, 'C', challenge.nonce, response.nonce, response.mac)) {
    *why = "HMAC-SHA256 failed in libcrypto";
    return rcnSystemError;
  }
  std::memcpy(message.data(), &response, sizeof response);
  if (requestBytes) std::memcpy(message.data() + sizeof response, request, requestBytes);
  RCN_CHECK(socketSendAll(fd, message.data(), message.size(), deadline, why));
  Verdict verdict{};
  RCN_CHECK(socketRecvAll(fd, &verdict, sizeof verdict, deadline, why));
  if (verdict.accepted != 1) {
    *why = "it refused our proof of the key (the keys differ)";
    return rcnInvalidArgument;
  }
  if (!macMatches(key, context, 'L', challenge.nonce, response.nonce, verdict.mac)) {
    *why = "it could not prove that it holds the key (not the process we meant to reach)";
    return rcnRemoteError;
  }
  return rcnSuccess;
}

// ---- The listener --------------------------------------------------------------

struct AuthListener::Pending {
  int fd = -1;
  uint8_t nonce[kNonceBytes];
  std::vector<uint8_t> heard;  // Response + request, as it arrives
  size_t got = 0;
  Deadline giveUp;
};

AuthListener::AuthListener(std::vector<int> listenFds, AuthKey key, const char* context, size_t requestBytes,
                           std::string who)
    : listenFds_(std::move(listenFds)),
      key_(std::move(key)),
      context_(context),
      requestBytes_(requestBytes),
      who_(std::move(who)) {}

AuthListener::~AuthListener() {
  for (auto& p : pending_) socketClose(&p->fd);
}

void AuthListener::turnAway(Pending* p, const char* why) {
  ++refused_;
  if (refused_ <= 3)
    RCN_WARN(RCN_LOG_BOOTSTRAP, "%s: turned away a connection: %s%s", who_.c_str(), why,
             refused_ == 3 ? "; more are logged at INFO" : "");
  else RCN_INFO(RCN_LOG_BOOTSTRAP, "%s: turned away a connection: %s", who_.c_str(), why);
  socketClose(&p->fd);
}

// Takes every connection waiting on listenFd and challenges each at once.
// False when the listening socket itself failed (shut down, closed).
bool AuthListener::acceptAll(int listenFd) {
  for (;;) {
    bool retry = false;
    const int fd = acceptWaiting(listenFd, &retry);
    // EAGAIN: none left; the others are a connection that went wrong on its own.
    if (fd < 0) return retry;
    auto p = std::make_unique<Pending>();
    p->fd = fd;
    p->heard.resize(sizeof(Response) + requestBytes_);
    p->giveUp = deadlineAfterMs(kAuthWaitMs);
    Challenge challenge{kAuthProtocol, {}};
    if (randomBytes(p->nonce, kNonceBytes) != rcnSuccess) {
      socketClose(&p->fd);
      continue;
    }
    std::memcpy(challenge.nonce, p->nonce, kNonceBytes);
    // A fresh connection's send buffer always takes these few bytes.
    if (send(fd, &challenge, sizeof challenge, MSG_NOSIGNAL | MSG_DONTWAIT) != ssize_t(sizeof challenge)) {
      socketClose(&p->fd);
      continue;
    }
    if (pending_.size() >= kAuthMaxPending) {
      turnAway(pending_.front().get(), "too many connections at once; dropped the oldest");
      pending_.erase(pending_.begin());
    }
    pending_.push_back(std::move(p));
  }
}

bool AuthListener::hear(Pending* p, int* fd, void* request) {
  const ssize_t n = recv(p->fd, p->heard.data() + p->got, p->heard.size() - p->got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {
    turnAway(p, "it closed before proving the key");
    return true;
  }
  p->got += size_t(n);
  if (p->got < p->heard.size()) return false;
  Response response;
  std::memcpy(&response, p->heard.data(), sizeof response);
  Verdict verdict{};
  verdict.accepted = macMatches(key_, context_, 'C', p->nonce, response.nonce, response.mac) ? 1 : 0;
  if (verdict.accepted && !computeMac(key_, context_, 'L', p->nonce, response.nonce, verdict.mac)) verdict.accepted = 0;
  // Small enough for any send buffer; a refusal is told so the peer can say why it failed.
  const bool sent = send(p->fd, &verdict, sizeof verdict, MSG_NOSIGNAL | MSG_DONTWAIT) == ssize_t(sizeof verdict);
  if (!verdict.accepted) {
    turnAway(p, "its proof of the key was wrong (another run's id or key, or not a rank)");
    return true;
  }
  if (!sent) {
    turnAway(p, "it left during the handshake");
    return true;
  }
  if (requestBytes_) std::memcpy(request, p->heard.data() + sizeof response, requestBytes_);
  *fd = p->fd;
  p->fd = -1;
  return true;
}

void AuthListener::dropExpired() {
  const Deadline now = Clock::now();
  for (auto& p : pending_)
    if (p->giveUp <= now) turnAway(p.get(), "it did not prove the key in time");
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const auto& p) { return p->fd < 0; }),
                 pending_.end());
}

rcnResult_t AuthListener::next(Deadline deadline, int* fd, void* request, std::string* why) {
  *fd = -1;
  for (;;) {
    dropExpired();
    std::vector<pollfd> fds;
    for (int l : listenFds_) fds.push_back(pollfd{l, POLLIN, 0});
    Deadline wake = deadline;
    for (auto& p : pending_) {
      fds.push_back(pollfd{p->fd, POLLIN, 0});
      wake = std::min(wake, p->giveUp);
    }
    const int64_t waitMs = msUntil(wake);
    if (waitMs == 0 && msUntil(deadline) == 0) {
      *why = "timed out";
      return rcnRemoteError;
    }
    // +1: poll rounds down, and a wake-up just before a connection's end would spin.
    const int n = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(waitMs + 1, 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = errnoText("poll", errno);
      return rcnSystemError;
    }
    for (size_t i = 0; i < listenFds_.size(); ++i) {
      if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
        *why = "listening socket closed";
        return rcnSystemError;
      }
    }
    // Hear the connections first: one that completes is handed out before
    // newcomers are even accepted.
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (!fds[listenFds_.size() + i].revents) continue;
      if (hear(pending_[i].get(), fd, request) && *fd >= 0) break;
    }
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const auto& p) { return p->fd < 0; }),
                   pending_.end());
    if (*fd >= 0) return rcnSuccess;
    for (size_t i = 0; i < listenFds_.size(); ++i) {
      if ((fds[i].revents & POLLIN) && !acceptAll(listenFds_[i])) {
        *why = errnoText("accept", errno);
        return rcnSystemError;
      }
    }
  }
}

}  // namespace rcn
