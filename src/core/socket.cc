// SPDX-License-Identifier: BSD-3-Clause
#include "core/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "core/params.h"

namespace rcn {

std::string SocketAddress::text() const {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (storage.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (storage.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "<unknown address family " + std::to_string(storage.ss_family) + ">";
}

// ---- Address selection ------------------------------------------------------

namespace {

// One parsed interface list in NCCL's syntax.
struct IfnameFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  bool matches(const char* name) const {
    bool listed = false;
    for (const std::string& n : names) {
      listed = exact ? n == name : std::strncmp(name, n.c_str(), n.size()) == 0;
      if (listed) break;
    }
    return exclude ? !listed : listed;
  }
};

IfnameFilter parseIfnameFilter(std::string text) {
  IfnameFilter filter;
  if (!text.empty() && text[0] == '^') {
    filter.exclude = true;
    text.erase(0, 1);
  }
  if (!text.empty() && text[0] == '=') {
    filter.exact = true;
    text.erase(0, 1);
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) filter.names.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return filter;
}

bool isUsableFamily(const sockaddr* sa) {
  return sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6);
}

void copyAddress(const sockaddr* sa, SocketAddress* addr) {
  addr->len = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  std::memset(&addr->storage, 0, sizeof addr->storage);
  std::memcpy(&addr->storage, sa, addr->len);
}

// An IPv6 link-local address (fe80::/10) names its interface by a scope id
// that means nothing on another host: peers could not connect to it.
bool isLinkLocal6(const sockaddr* sa) {
  if (sa->sa_family != AF_INET6) return false;
  const uint8_t* bytes = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr.s6_addr;
  return bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80;
}

// The interface named by the user's list: IPv4 before IPv6, and loopback
// last (a list such as "^docker0" matches lo too, which other hosts cannot reach).
bool findListed(ifaddrs* list, const IfnameFilter& filter, SocketAddress* addr) {
  for (bool loopback : {false, true}) {
    for (int family : {AF_INET, AF_INET6}) {
      for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
        if (!isUsableFamily(ifa->ifa_addr) || ifa->ifa_addr->sa_family != family) continue;
        if (!(ifa->ifa_flags & IFF_UP) || !filter.matches(ifa->ifa_name)) continue;
        if (bool(ifa->ifa_flags & IFF_LOOPBACK) != loopback || isLinkLocal6(ifa->ifa_addr)) continue;
        copyAddress(ifa->ifa_addr, addr);
        RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: using interface %s (%s)%s", ifa->ifa_name, addr->text().c_str(),
                 loopback ? ": loopback, so only ranks on this host can reach it" : "");
        return true;
      }
    }
  }
  return false;
}

// The first up IPv4 interface that is neither loopback nor a docker bridge.
bool findDefault(ifaddrs* list, SocketAddress* addr) {
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if (!(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK)) continue;
    if (std::strncmp(ifa->ifa_name, "docker", 6) == 0) continue;
    copyAddress(ifa->ifa_addr, addr);
    RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: using interface %s (%s)", ifa->ifa_name, addr->text().c_str());
    return true;
  }
  return false;
}

std::string interfaceNames(ifaddrs* list) {
  std::string names;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!isUsableFamily(ifa->ifa_addr)) continue;
    if (names.find(std::string(ifa->ifa_name) + " ") != std::string::npos) continue;
    names += std::string(ifa->ifa_name) + " ";
  }
  return names.empty() ? "(none)" : names;
}

}  // namespace

bool socketIfnameSet() {
  const char* nccl = std::getenv("NCCL_SOCKET_IFNAME");
  return !paramStr(ParamId::SocketIfname).empty() || (nccl && *nccl);
}

bool socketIsLoopback(const SocketAddress& addr) {
  return addr.storage.ss_family == AF_INET &&
         (ntohl(reinterpret_cast<const sockaddr_in*>(&addr.storage)->sin_addr.s_addr) >> 24) == 127;
}

bool socketIsLocalAddress(const SocketAddress& addr) {
  if (socketIsLoopback(addr)) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* ifa = list; ifa && !local; ifa = ifa->ifa_next) {
    if (!isUsableFamily(ifa->ifa_addr) || ifa->ifa_addr->sa_family != addr.storage.ss_family) continue;
    if (addr.storage.ss_family == AF_INET)
      local = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr.s_addr ==
              reinterpret_cast<const sockaddr_in*>(&addr.storage)->sin_addr.s_addr;
    else
      local = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr,
                          &reinterpret_cast<const sockaddr_in6*>(&addr.storage)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  freeifaddrs(list);
  return local;
}

rcnResult_t socketPickListenAddress(SocketAddress* addr) {
  std::string wanted = paramStr(ParamId::SocketIfname);
  const char* source = "ROCENANTE_SOCKET_IFNAME";
  if (wanted.empty()) {
    const char* nccl = std::getenv("NCCL_SOCKET_IFNAME");
    if (nccl && *nccl) {
      wanted = nccl;
      source = "NCCL_SOCKET_IFNAME";
    }
  }
  ifaddrs* list = nullptr;
  RCN_SYS_CHECK(getifaddrs(&list), "getifaddrs");
  bool found = false;
  if (!wanted.empty()) {
    found = findListed(list, parseIfnameFilter(wanted), addr);
    if (!found) {
      RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: %s=%s matches no up interface with an IP address (IPv6 "
               "link-local ones do not count: other hosts cannot reach them); interfaces: %s",
               source, wanted.c_str(), interfaceNames(list).c_str());
      freeifaddrs(list);
      return rcnInvalidArgument;
    }
  } else {
    found = findDefault(list, addr);
  }
  freeifaddrs(list);
  if (!found) {
    sockaddr_in loopback{};
    loopback.sin_family = AF_INET;
    loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    copyAddress(reinterpret_cast<sockaddr*>(&loopback), addr);
    RCN_INFO(RCN_LOG_BOOTSTRAP, "bootstrap: no network interface, using loopback");
  }
  return rcnSuccess;
}

// ---- Listen, connect, accept ---------------------------------------------------

namespace {

void setPort(SocketAddress* addr, uint16_t port) {
  if (addr->storage.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&addr->storage)->sin_port = htons(port);
  else
    reinterpret_cast<sockaddr_in6*>(&addr->storage)->sin6_port = htons(port);
}

rcnResult_t newSocket(int family, int* fd) {
  *fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  RCN_SYS_CHECK(*fd, "socket");
  return rcnSuccess;
}

// Small messages go out at once instead of waiting for Nagle's timer.
void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Polls one fd for events until the deadline. Returns 1 ready, 0 timed out, -1 error.
int pollOne(int fd, short events, Deadline deadline, short* revents) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(msUntil(deadline), 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0 && msUntil(deadline) > 0) continue;  // poll rounds its timeout down
    if (n == 0) return 0;
    *revents = p.revents;
    return 1;
  }
}

bool isRetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT || err == EHOSTUNREACH ||
         err == ENETUNREACH || err == EAGAIN || err == ECONNABORTED;
}

// One connect attempt. Returns 1 connected, 0 retryable failure (why set), -1 hard failure.
int connectOnce(const SocketAddress& addr, Deadline deadline, int fd, std::string* why) {
  if (connect(fd, addr.sa(), addr.len) == 0) return 1;
  const int connectErr = errno;
  if (connectErr != EINPROGRESS) {
    *why = errnoText("connect", connectErr);
    return isRetryableConnectError(connectErr) ? 0 : -1;
  }
  short revents = 0;
  int ready = pollOne(fd, POLLOUT, deadline, &revents);
  if (ready <= 0) {
    *why = ready == 0 ? "no answer" : errnoText("poll", errno);
    return ready == 0 ? 0 : -1;
  }
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == 0) return 1;
  *why = errnoText("connect", err);
  return isRetryableConnectError(err) ? 0 : -1;
}

// A connect to a port on this host with nobody listening can land on the
// connecting socket itself when the kernel picks that very port as the source
// (a MASTER_PORT inside the ephemeral range): it would then read its own
// messages back.
bool connectedToItself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t localLen = sizeof local, peerLen = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &localLen) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peerLen) != 0)
    return false;
  return localLen == peerLen && std::memcmp(&local, &peer, localLen) == 0;
}

bool acceptRetryable(int err) {
  switch (err) {
    case EAGAIN: case EINTR: case ECONNABORTED:
    case ENETDOWN: case EPROTO: case ENOPROTOOPT: case EHOSTDOWN: case ENONET:
    case EHOSTUNREACH: case EOPNOTSUPP: case ENETUNREACH:
      return true;
    default:
      return false;
  }
}

}  // namespace

rcnResult_t socketListen(const SocketAddress& addr, int* fd, SocketAddress* bound) {
  SocketAddress any = addr;
  setPort(&any, 0);
  RCN_CHECK(newSocket(any.storage.ss_family, fd));
  if (bind(*fd, any.sa(), any.len) != 0 || listen(*fd, SOMAXCONN) != 0) {
    const int err = errno;  // read before any.text() allocates
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: cannot listen on %s: %s", any.text().c_str(), strerror(err));
    socketClose(fd);
    return rcnSystemError;
  }
  bound->len = sizeof bound->storage;
  if (getsockname(*fd, bound->sa(), &bound->len) != 0) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap: getsockname: %s", strerror(errno));
    socketClose(fd);
    return rcnSystemError;
  }
  return rcnSuccess;
}

rcnResult_t socketConnect(const SocketAddress& addr, Deadline deadline, int* fd, std::string* why) {
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    RCN_CHECK(newSocket(addr.storage.ss_family, fd));
    int outcome = connectOnce(addr, deadline, *fd, why);
    if (outcome == 1 && connectedToItself(*fd)) {
      *why = "connected to itself (nothing listens there yet, and the port is one the kernel hands out)";
      outcome = 0;
    }
    if (outcome == 1) {
      setNoDelay(*fd);
      return rcnSuccess;
    }
    socketClose(fd);
    if (outcome < 0) return rcnSystemError;
    if (msUntil(deadline) == 0) return rcnRemoteError;
    backOff(deadline, &backoff, std::chrono::milliseconds(200));
  }
}

int acceptWaiting(int listenFd, bool* retry) {
  const int fd = accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    setNoDelay(fd);
    return fd;
  }
  *retry = acceptRetryable(errno);
  return -1;
}

rcnResult_t socketAccept(int listenFd, Deadline deadline, int* fd, std::string* why) {
  for (;;) {
    short revents = 0;
    int ready = pollOne(listenFd, POLLIN, deadline, &revents);
    if (ready == 0) {
      *why = "timed out";
      return rcnRemoteError;
    }
    if (ready < 0 || (revents & (POLLERR | POLLNVAL))) {
      *why = ready < 0 ? errnoText("poll", errno) : "listening socket closed";
      return rcnSystemError;
    }
    bool retry = false;
    *fd = acceptWaiting(listenFd, &retry);
    if (*fd >= 0) return rcnSuccess;
    // The connection may have gone away between poll and accept, or carried
    // a network error of its own (accept(2) asks to retry those): try again.
    if (retry) continue;
    *why = errnoText("accept", errno);
    return rcnSystemError;
  }
}

// ---- Send / receive -------------------------------------------------------------

namespace {

// Progress of one direction of a transfer.
struct Transfer {
  int fd;
  char* data;
  size_t left;
};

bool isPeerGoneError(int err) { return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ETIMEDOUT; }

// A send or recv that returned -1 with err: a retry (rcnSuccess) or an error
// with why set. err is taken by value: building the text may change errno.
rcnResult_t transferFailed(const char* op, int err, std::string* why) {
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return rcnSuccess;
  const bool peerGone = isPeerGoneError(err);
  *why = peerGone ? "the peer closed the connection (" + errnoText(op, err) + ")" : errnoText(op, err);
  return peerGone ? rcnRemoteError : rcnSystemError;
}

// Moves as many bytes as the socket takes now. Returns rcnSuccess (maybe with
// bytes left), or an error with why set.
rcnResult_t sendSome(Transfer* t, std::string* why) {
  ssize_t n = send(t->fd, t->data, t->left, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) {
    t->data += n;
    t->left -= static_cast<size_t>(n);
    return rcnSuccess;
  }
  return transferFailed("send", errno, why);
}

rcnResult_t recvSome(Transfer* t, std::string* why) {
  ssize_t n = recv(t->fd, t->data, t->left, MSG_DONTWAIT);
  if (n > 0) {
    t->data += n;
    t->left -= static_cast<size_t>(n);
    return rcnSuccess;
  }
  if (n == 0) {
    *why = "the peer closed the connection";
    return rcnRemoteError;
  }
  return transferFailed("recv", errno, why);
}

}  // namespace

rcnResult_t socketSendRecv(int sendFd, const void* sendData, int recvFd, void* recvData, size_t bytes,
                           Deadline deadline, std::string* why, char* failedSide) {
  Transfer out{sendFd, static_cast<char*>(const_cast<void*>(sendData)), sendFd >= 0 ? bytes : 0};
  Transfer in{recvFd, static_cast<char*>(recvData), recvFd >= 0 ? bytes : 0};
  *failedSide = 0;
  bool lastLook = false;  // the one look, without waiting, past the deadline
  while (out.left > 0 || in.left > 0) {
    pollfd fds[2];
    int count = 0;
    if (out.left > 0) fds[count++] = pollfd{out.fd, POLLOUT, 0};
    if (in.left > 0) fds[count++] = pollfd{in.fd, POLLIN, 0};
    // Past the deadline the poll looks once more, without waiting: what has
    // arrived by then is taken, not refused. A second time it gives up.
    const int64_t waitMs = msUntil(deadline);
    const bool timedOut = waitMs == 0 && lastLook;
    lastLook = waitMs == 0;
    int n = timedOut ? 0 : poll(fds, count, static_cast<int>(std::min<int64_t>(waitMs, 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = errnoText("poll", errno);
      return rcnSystemError;
    }
    if (n == 0 && waitMs == 0) {
      *failedSide = in.left > 0 ? 'r' : 's';
      *why = "timed out";
      return rcnRemoteError;
    }
    // Trying both directions whenever anything is ready is simpler than
    // mapping revents back, and harmless: idle sockets just say EAGAIN.
    if (n == 0) continue;
    rcnResult_t res = out.left > 0 ? sendSome(&out, why) : rcnSuccess;
    if (res != rcnSuccess) {
      *failedSide = 's';
      return res;
    }
    res = in.left > 0 ? recvSome(&in, why) : rcnSuccess;
    if (res != rcnSuccess) {
      *failedSide = 'r';
      return res;
    }
  }
  return rcnSuccess;
}

rcnResult_t socketSendAll(int fd, const void* data, size_t bytes, Deadline deadline, std::string* why) {
  char side = 0;
  return socketSendRecv(fd, data, -1, nullptr, bytes, deadline, why, &side);
}

rcnResult_t socketRecvAll(int fd, void* data, size_t bytes, Deadline deadline, std::string* why) {
  char side = 0;
  return socketSendRecv(-1, nullptr, fd, data, bytes, deadline, why, &side);
}

void socketClose(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

}  // namespace rcn
