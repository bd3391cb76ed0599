// SPDX-License-Identifier: BSD-3-Clause
// Authenticated connections for the bootstrap and the wires: before a
// listener gives a connection anything, the other end proves that it holds
// the communicator's key with an HMAC-SHA256 over a fresh challenge, and the
// listener proves the same back (so a process squatting on a port cannot
// hand out a forged id or table). This stops anyone who can reach a port
// but does not know the key (a stranger on the network, another local user).
// It does not encrypt: whoever can read the traffic can read the key as it
// travels inside later messages, as with NCCL's and PyTorch's bootstraps,
// which do not authenticate at all (docs/RELIABILITY.md, "Trust model").
//
// Accepting is concurrent: every pending connection has a deadline of its
// own, so silent or slow connections cannot delay the ranks behind them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "rocenante/rocenante.h"

namespace rcn {

// The bytes of a shared key: a unique id's random secret, or the launch's
// ROCENANTE_BOOTSTRAP_KEY. Empty means "no key": the handshake then runs
// but proves nothing (a rendezvous without a configured key).
struct AuthKey {
  std::string bytes;
};

// The random secret a unique id carries.
constexpr size_t kIdSecretBytes = 32;

// Fills out with bytes from getrandom(2) (the kernel's CSPRNG).
rcnResult_t randomBytes(void* out, size_t bytes);

// The client side of a handshake on a connected socket: reads the listener's
// challenge, sends the proof followed by `request` (requestBytes, the
// protocol's first message), and checks the listener's proof. `context`
// names the protocol ("root", "ring", "rendezvous", "tcp-wire"): a proof for
// one is worthless for another. Returns rcnSuccess; rcnInvalidArgument when
// the listener refused our proof (the keys differ), why saying so;
// rcnRemoteError when the listener's proof is wrong, it is not rocenante, or
// the connection failed or timed out (why: "timed out" exactly then).
rcnResult_t authConnect(int fd, const AuthKey& key, const char* context, const void* request, size_t requestBytes,
                        Deadline deadline, std::string* why);

// How long one accepted connection may take to prove the key and send its
// request. Others are accepted and heard meanwhile, so this bounds only what
// a silent connection holds (one descriptor), never an honest rank's wait.
constexpr int64_t kAuthWaitMs = 10000;
// The most connections heard at once; past it the oldest is dropped, so a
// flood cannot take every descriptor of the process.
constexpr size_t kAuthMaxPending = 256;

// The listener side: owns nothing but the connections it has not handed
// out. Each accepted connection gets a challenge at once and has
// kAuthWaitMs (at most until the caller's deadline) to answer with a valid
// proof and its request. Connections that fail are closed and logged (a few
// at WARN, then at INFO), never returned.
class AuthListener {
 public:
  // `who` names the listener in log lines ("bootstrap root").
  AuthListener(std::vector<int> listenFds, AuthKey key, const char* context, size_t requestBytes, std::string who);
  ~AuthListener();
  AuthListener(const AuthListener&) = delete;
  AuthListener& operator=(const AuthListener&) = delete;

  // The next connection whose proof held: *fd (non-blocking, the caller's
  // to close) and its request in `request` (requestBytes). rcnRemoteError
  // with why "timed out" at the deadline, rcnSystemError when a listening
  // socket fails (shutdown(2) on it is how another thread stops the wait).
  rcnResult_t next(Deadline deadline, int* fd, void* request, std::string* why);

  // Connections turned away so far: a wrong proof, or none in time.
  int refused() const { return refused_; }

 private:
  struct Pending;
  bool acceptAll(int listenFd);
  // Reads what has arrived; true when the connection is done (handed out
  // through *fd, or closed).
  bool hear(Pending* p, int* fd, void* request);
  void turnAway(Pending* p, const char* why);
  void dropExpired();

  std::vector<int> listenFds_;
  AuthKey key_;
  std::string context_;
  size_t requestBytes_;
  std::string who_;
  std::vector<std::unique_ptr<Pending>> pending_;
  int refused_ = 0;
};

}  // namespace rcn
