// SPDX-License-Identifier: BSD-3-Clause
// Rendezvous at MASTER_ADDR:MASTER_PORT. Rank 0 accepts nranks-1 connections;
// each joiner proves the launch's key (ROCENANTE_BOOTSTRAP_KEY, core/auth.h;
// without one the proof is of the empty key, which anyone can make), sends
// who it is and gets the unique id back (or why it was refused), then
// everyone joins the TCP bootstrap with that id. Rank 0 listens on the
// chosen interface or MASTER_ADDR's address, never on every interface.
#include "core/bootstrap_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/auth.h"
#include "core/bootstrap_key.h"
#include "core/check.h"
#include "core/deadline.h"
#include "core/params.h"
#include "core/rendezvous_wire.h"
#include "core/socket.h"

namespace rcn {

namespace {

// What the joiners' proofs are for (core/auth.h).
constexpr const char* kRendezvousContext = "rendezvous";

// One lookup of host in `family`; 0 or getaddrinfo's error.
int lookUp(const char* host, int port, int family, SocketAddress* out) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host, std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || !res) return rc != 0 ? rc : EAI_NONAME;
  memcpy(&out->storage, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

// MASTER_ADDR's IPv4 address, asked again until the deadline: under a job
// scheduler the workers may start before rank 0's name is in DNS.
rcnResult_t resolve(const char* host, int port, Deadline deadline, SocketAddress* out) {
  auto backoff = std::chrono::milliseconds(50);
  for (;;) {
    const int rc = lookUp(host, port, AF_INET, out);
    if (rc == 0) return rcnSuccess;
    if (msUntil(deadline) == 0) {
      SocketAddress v6;
      const bool onlyV6 = lookUp(host, port, AF_INET6, &v6) == 0;
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: cannot resolve MASTER_ADDR '%s' to an IPv4 address within %lld ms "
               "(ROCENANTE_BOOTSTRAP_TIMEOUT_MS): %s", host, static_cast<long long>(bootstrapTimeoutMs()),
               onlyV6 ? "it has only IPv6 addresses, which the rendezvous does not support" : gai_strerror(rc));
      return rcnInvalidArgument;
    }
    backOff(deadline, &backoff, std::chrono::milliseconds(1000));
  }
}

// socketListen picks its own port; the rendezvous needs the agreed one.
rcnResult_t listenOnPort(SocketAddress where, int port, int* fd) {
  // sin_port and sin6_port lie at the same offset.
  reinterpret_cast<sockaddr_in*>(&where.storage)->sin_port = htons(static_cast<uint16_t>(port));
  *fd = socket(where.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  RCN_SYS_CHECK(*fd, "socket");
  int one = 1;
  setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(*fd, where.sa(), where.len) != 0 || listen(*fd, SOMAXCONN) != 0) {
    const int err = errno;  // read before where.text() allocates
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 cannot listen on port %d (MASTER_PORT) at %s: %s", port,
             where.text().c_str(), strerror(err));
    socketClose(fd);
    return rcnSystemError;
  }
  return rcnSuccess;
}

bool isLiteralAddress(const char* host) {
  in_addr parsed{};
  return inet_pton(AF_INET, host, &parsed) == 1 || std::strcmp(host, "localhost") == 0;
}

// Where rank 0's rendezvous listens (never every interface): the interface
// ROCENANTE_SOCKET_IFNAME names; else MASTER_ADDR's address when it is this
// host's; else the interface the bootstrap would pick. A host name that
// resolves here to loopback (Debian maps its own name to 127.0.1.1) while
// other hosts resolve it to a real address gets both.
rcnResult_t rendezvousAddresses(const char* masterAddr, std::vector<SocketAddress>* where) {
  SocketAddress picked;
  RCN_CHECK(socketPickListenAddress(&picked));
  SocketAddress master;
  if (socketIfnameSet() || !masterAddr || !masterAddr[0] || lookUp(masterAddr, 0, AF_INET, &master) != 0 ||
      !socketIsLocalAddress(master)) {
    where->push_back(picked);
    return rcnSuccess;
  }
  where->push_back(master);
  if (socketIsLoopback(master) && !isLiteralAddress(masterAddr) && !socketIsLoopback(picked)) where->push_back(picked);
  return rcnSuccess;
}

// Answers one join. True when the joiner took the id: the reply reached it
// and it was accepted (a joiner that died before the answer arrived does not
// keep its rank from a restart).
bool answerJoin(int fd, const RendezvousJoin& join, const rcnUniqueId& id, int nranks, int port, Deadline deadline,
                std::vector<char>* taken) {
  RendezvousReply reply{};
  reply.refusal = judgeJoin(join, nranks, *taken);
  reply.nranks = nranks;
  if (reply.refusal == kAccepted) reply.id = id;
  std::string why;
  const bool sent = socketSendAll(fd, &reply, sizeof reply, deadline, &why) == rcnSuccess;
  if (reply.refusal != kAccepted) {
    // Refused joins do not count: the right one may still arrive.
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 on port %d refused a join as rank %d of %d (world of %d): %s", port,
             join.rank, join.nranks, nranks, refusalText(RendezvousRefusal(reply.refusal)));
    return false;
  }
  if (!sent) {
    RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d joined but left before the id reached it: %s", join.rank,
             why.c_str());
    return false;
  }
  (*taken)[join.rank] = 1;
  return true;
}

// Listeners closed when rank 0 is done serving, however it ends.
struct ListenSockets {
  std::vector<int> fds;
  ~ListenSockets() {
    for (int& fd : fds) socketClose(&fd);
  }
};

rcnResult_t serveId(const rcnUniqueId& id, int nranks, const char* masterAddr, int port, const AuthKey& key,
                    Deadline deadline) {
  std::vector<SocketAddress> where;
  RCN_CHECK(rendezvousAddresses(masterAddr, &where));
  ListenSockets sockets;
  std::string places;
  for (const SocketAddress& addr : where) {
    int fd = -1;
    RCN_CHECK(listenOnPort(addr, port, &fd));
    sockets.fds.push_back(fd);
    places += (places.empty() ? "" : " and ") + addr.text();
  }
  RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 serves the id on %s (port %d)%s", places.c_str(), port,
           key.bytes.empty() ? "; no ROCENANTE_BOOTSTRAP_KEY: any process that reaches the port can join" : "");
  AuthListener listener(sockets.fds, key, kRendezvousContext, sizeof(RendezvousJoin),
                        "bootstrap rank 0 on port " + std::to_string(port));
  rcnResult_t res = rcnSuccess;
  std::vector<char> taken(static_cast<size_t>(nranks), 0);
  taken[0] = 1;
  for (int joined = 1; joined < nranks;) {
    int fd = -1;
    std::string why;
    RendezvousJoin join{};
    res = listener.next(deadline, &fd, &join, &why);
    if (res != rcnSuccess) {
      RCN_WARN(
          RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 on port %d: %s; %d of %d ranks arrived%s", port, why.c_str(), joined,
          nranks,
          listener.refused() ? " (connections that could not prove ROCENANTE_BOOTSTRAP_KEY were turned away)" : "");
      break;
    }
    if (answerJoin(fd, join, id, nranks, port, deadline, &taken)) ++joined;
    socketClose(&fd);
  }
  return res;
}

rcnResult_t fetchId(int rank, int nranks, const SocketAddress& root, const AuthKey& key, Deadline deadline,
                    rcnUniqueId* id) {
  int fd = -1;
  std::string why;
  rcnResult_t res = socketConnect(root, deadline, &fd, &why);
  RendezvousJoin join{rank, nranks};
  RendezvousReply reply{};
  if (res == rcnSuccess) res = authConnect(fd, key, kRendezvousContext, &join, sizeof join, deadline, &why);
  if (res == rcnInvalidArgument) {
    socketClose(&fd);
    RCN_WARN(RCN_LOG_BOOTSTRAP,
             "bootstrap: rank %d: rank 0 at %s refused our proof of the bootstrap key: "
             "ROCENANTE_BOOTSTRAP_KEY differs between the ranks, or is set on only some",
             rank, root.text().c_str());
    return res;
  }
  if (res == rcnSuccess) res = socketRecvAll(fd, &reply, sizeof reply, deadline, &why);
  socketClose(&fd);
  if (res != rcnSuccess) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d cannot get the id from rank 0 at %s: %s (is rank 0 "
             "running, and the same rocenante version?)", rank, root.text().c_str(), why.c_str());
    return res;
  }
  res = readRendezvousReply(reply, rank, nranks, id, &why);
  if (res != rcnSuccess) RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 at %s: %s", root.text().c_str(), why.c_str());
  return res;
}

}  // namespace

rcnResult_t bootstrapInitFromEnv(int rank, int nranks, const char* addr, int port, std::unique_ptr<Bootstrap>* out) {
  RCN_ARG_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "bootstrap: rank %d outside a world of %d", rank, nranks);
  RCN_ARG_CHECK(port > 0 && port < 65536, "bootstrap: MASTER_PORT %d is not a TCP port", port);
  RCN_ARG_CHECK(rank == 0 || (addr && addr[0]), "bootstrap: rank %d needs MASTER_ADDR", rank);
  AuthKey key;
  bool keyed = false;
  RCN_CHECK(launchKey(&key, &keyed));
  Deadline deadline = deadlineAfterMs(bootstrapTimeoutMs());
  rcnUniqueId id{};
  if (rank == 0) {
    RCN_CHECK(bootstrapGetUniqueId(&id));
    if (nranks > 1) RCN_CHECK(serveId(id, nranks, addr, port, key, deadline));
  } else {
    SocketAddress root;
    RCN_CHECK(resolve(addr, port, deadline, &root));
    RCN_CHECK(fetchId(rank, nranks, root, key, deadline, &id));
  }
  return bootstrapInitTcp(id, rank, nranks, out);
}

}  // namespace rcn
