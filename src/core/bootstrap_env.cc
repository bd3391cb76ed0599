// Rendezvous at MASTER_ADDR:MASTER_PORT. Rank 0 accepts nranks-1 connections;
// each joiner sends who it is and gets the unique id back (or why it was
// refused), then everyone joins the TCP bootstrap with that id.
#include "core/bootstrap_env.h"

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

#include "core/check.h"
#include "core/deadline.h"
#include "core/params.h"
#include "core/socket.h"

namespace rcn {

namespace {

// "RCNENV02": the reply carries the magic and a refusal's reason (01 did not).
const uint64_t kEnvMagic = 0x52434e454e563032ull;
const uint64_t kEnvMagicV1 = 0x52434e454e563031ull;  // recognised only to name it

struct Join {
  uint64_t magic;
  int32_t rank;
  int32_t nranks;
};

// Why rank 0 refused a join (Reply::refusal).
enum Refusal : int32_t { kAccepted = 0, kOtherSize = 1, kRankOutOfRange = 2, kRankTaken = 3 };

struct Reply {
  uint64_t magic;   // kEnvMagic: the answer comes from a rocenante rank 0
  int32_t refusal;  // kAccepted: id is valid
  int32_t nranks;   // the size rank 0 runs with
  rcnUniqueId id;
};

// Rank 0's answer to a join; `taken` has a 1 for every rank given the id.
Refusal judge(const Join& join, int nranks, const std::vector<char>& taken) {
  if (join.nranks != nranks) return kOtherSize;
  if (join.rank < 1 || join.rank >= nranks) return kRankOutOfRange;
  return taken[join.rank] ? kRankTaken : kAccepted;
}

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
rcnResult_t listenOnPort(int port, int* fd) {
  *fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  RCN_SYS_CHECK(*fd, "socket");
  int one = 1;
  setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(*fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 || listen(*fd, SOMAXCONN) != 0) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 cannot listen on port %d (MASTER_PORT): %s", port,
             strerror(errno));
    socketClose(fd);
    return rcnSystemError;
  }
  return rcnSuccess;
}

// What rank 0's refusal means, for both sides' messages.
const char* refusalText(Refusal refusal) {
  switch (refusal) {
    case kOtherSize: return "the ranks disagree on the world size";
    case kRankOutOfRange: return "no such rank in this world";
    case kRankTaken: return "another process joined as that rank first (two launches on one port?)";
    default: return "accepted";
  }
}

// Answers one join. True when the joiner took the id: the reply reached it
// and it was accepted (a joiner that died before the answer arrived does not
// keep its rank from a restart).
bool answerJoin(int fd, const Join& join, const rcnUniqueId& id, int nranks, int port, Deadline deadline,
                std::vector<char>* taken) {
  Reply reply{};
  reply.magic = kEnvMagic;
  reply.refusal = judge(join, nranks, *taken);
  reply.nranks = nranks;
  if (reply.refusal == kAccepted) reply.id = id;
  std::string why;
  const bool sent = socketSendAll(fd, &reply, sizeof reply, deadline, &why) == rcnSuccess;
  if (reply.refusal != kAccepted) {
    // Refused joins do not count: the right one may still arrive.
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 on port %d refused a join as rank %d of %d (world of %d): %s",
             port, join.rank, join.nranks, nranks, refusalText(Refusal(reply.refusal)));
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

rcnResult_t serveId(const rcnUniqueId& id, int nranks, int port, Deadline deadline) {
  int lfd = -1;
  RCN_CHECK(listenOnPort(port, &lfd));
  rcnResult_t res = rcnSuccess;
  std::vector<char> taken(static_cast<size_t>(nranks), 0);
  taken[0] = 1;
  for (int joined = 1; joined < nranks;) {
    int fd = -1;
    std::string why;
    res = socketAccept(lfd, deadline, &fd, &why);
    if (res != rcnSuccess) {
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 on port %d: %s; %d of %d ranks arrived", port, why.c_str(),
               joined, nranks);
      break;
    }
    // A rank sends its request as soon as it connects; a connection that
    // stays silent (a probe, a health check) gets a short wait of its own.
    Join join{};
    const bool heard = socketRecvHello(fd, &join, sizeof join, deadline, &why) == rcnSuccess;
    if (heard && join.magic == kEnvMagicV1)
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d runs an older rocenante (its join is version 1); every rank "
               "must run the same version", join.rank);
    if (heard && join.magic == kEnvMagic) {
      if (answerJoin(fd, join, id, nranks, port, deadline, &taken)) ++joined;
    } else {
      // Not one of ours (a port scanner, another job): ignore it, keep waiting.
      RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: ignored a stray connection on port %d", port);
    }
    socketClose(&fd);
  }
  socketClose(&lfd);
  return res;
}

rcnResult_t fetchId(int rank, int nranks, const SocketAddress& root, Deadline deadline, rcnUniqueId* id) {
  int fd = -1;
  std::string why;
  rcnResult_t res = socketConnect(root, deadline, &fd, &why);
  Join join{kEnvMagic, rank, nranks};
  Reply reply{};
  if (res == rcnSuccess) res = socketSendAll(fd, &join, sizeof join, deadline, &why);
  if (res == rcnSuccess) res = socketRecvAll(fd, &reply, sizeof reply, deadline, &why);
  socketClose(&fd);
  if (res != rcnSuccess) {
    // A rank 0 of an older version drops our join without an answer, as a stray.
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d cannot get the id from rank 0 at %s: %s (is rank 0 "
             "running, and the same rocenante version?)", rank, root.text().c_str(), why.c_str());
    return res;
  }
  if (reply.magic != kEnvMagic) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank %d: what answers at MASTER_ADDR:MASTER_PORT (%s) is not "
             "rocenante's rank 0 (another service)", rank, root.text().c_str());
    return rcnInvalidArgument;
  }
  if (reply.refusal != kAccepted) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: rank 0 at %s (a world of %d) refused rank %d of %d: %s",
             root.text().c_str(), reply.nranks, rank, nranks, refusalText(Refusal(reply.refusal)));
    return reply.refusal == kOtherSize ? rcnInvalidArgument : rcnInvalidUsage;
  }
  *id = reply.id;
  return rcnSuccess;
}

}  // namespace

rcnResult_t bootstrapInitFromEnv(int rank, int nranks, const char* addr, int port, std::unique_ptr<Bootstrap>* out) {
  RCN_ARG_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "bootstrap: rank %d outside a world of %d", rank, nranks);
  RCN_ARG_CHECK(port > 0 && port < 65536, "bootstrap: MASTER_PORT %d is not a TCP port", port);
  RCN_ARG_CHECK(rank == 0 || (addr && addr[0]), "bootstrap: rank %d needs MASTER_ADDR", rank);
  Deadline deadline = deadlineAfterMs(bootstrapTimeoutMs());
  rcnUniqueId id{};
  if (rank == 0) {
    RCN_CHECK(bootstrapGetUniqueId(&id));
    if (nranks > 1) RCN_CHECK(serveId(id, nranks, port, deadline));
  } else {
    SocketAddress root;
    RCN_CHECK(resolve(addr, port, deadline, &root));
    RCN_CHECK(fetchId(rank, nranks, root, deadline, &id));
  }
  return bootstrapInitTcp(id, rank, nranks, out);
}

}  // namespace rcn
