// SPDX-License-Identifier: BSD-3-Clause
#include "transport/p2p/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/log.h"
#include "transport/wire/peer_identity.h"

namespace rcn {

namespace {

// What precedes each descriptor on the wire.
struct FdHeader {
  uint64_t token;  // the receiver's token
  int32_t rank;    // the sender's rank
  int32_t pad;
};

socklen_t socketName(const FdEndpoint& ep, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file to clean up.
  int n = std::snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "rocenante-p2p-%d-%016llx",
                        static_cast<int>(ep.pid), static_cast<unsigned long long>(ep.token));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

// Waits until fd is ready for `events` or the deadline passes.
bool waitReady(int fd, short events, Deadline deadline, std::string* why) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = static_cast<int>(msUntil(deadline));
    int n = poll(&p, 1, ms);
    if (n > 0) return true;
    if (n == 0) {
      *why = "timed out";
      return false;
    }
    if (errno != EINTR) {
      *why = errnoText("poll", errno);
      return false;
    }
  }
}

// fd < 0: the header alone, which the receiver reads as "no descriptor".
bool sendFd(int sock, const FdHeader& header, int fd, Deadline deadline, std::string* why) {
  iovec iov{const_cast<FdHeader*>(&header), sizeof header};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  }
  for (;;) {
    if (!waitReady(sock, POLLOUT, deadline, why)) return false;
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof header)) return true;
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    *why = n < 0 ? errnoText("sendmsg", errno) : "short sendmsg";
    return false;
  }
}

bool recvFd(int sock, FdHeader* header, int* fd, Deadline deadline, std::string* why) {
  iovec iov{header, sizeof *header};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  for (;;) {
    if (!waitReady(sock, POLLIN, deadline, why)) return false;
    ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n != static_cast<ssize_t>(sizeof *header)) {
      *why = n < 0 ? errnoText("recvmsg", errno) : "peer closed the connection";
      return false;
    }
    break;
  }
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  *fd = -1;  // a peer that had none to give (its export failed)
  if (!cm) return true;
  if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) {
    *why = "message carried control data that is not a file descriptor";
    return false;
  }
  std::memcpy(fd, CMSG_DATA(cm), sizeof *fd);
  return true;
}

// Abstract sockets have no file permissions: any local process could
// connect, and would be handed our memory. The kernel vouches for who is at
// the other end; a process of another user is refused (one of ours could
// read our memory through /proc anyway).
bool sameUser(int sock, std::string* why) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    *why = errnoText("getsockopt(SO_PEERCRED)", errno);
    return false;
  }
  if (cred.uid == geteuid()) return true;
  *why = "the process at the other end (pid " + std::to_string(cred.pid) + ", uid " + std::to_string(cred.uid) +
         ") belongs to another user";
  return false;
}

bool connectTo(const FdEndpoint& ep, Deadline deadline, int* sock, std::string* why) {
  sockaddr_un addr;
  socklen_t len = socketName(ep, &addr);
  for (;;) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
      *why = errnoText("socket", errno);
      return false;
    }
    if (connect(s, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      *sock = s;
      return true;
    }
    int err = errno;
    close(s);
    // The listener exists before the bootstrap exchange; a refusal means a full backlog.
    if ((err != ECONNREFUSED && err != EAGAIN && err != EINTR) || msUntil(deadline) == 0) {
      *why = errnoText("connect", err);
      return false;
    }
    usleep(1000);
  }
}

bool acceptOne(int listenFd, Deadline deadline, int* sock, std::string* why) {
  for (;;) {
    if (!waitReady(listenFd, POLLIN, deadline, why)) return false;
    int s = accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (s >= 0) {
      *sock = s;
      return true;
    }
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
      *why = errnoText("accept", errno);
      return false;
    }
  }
}

}  // namespace

FdListener::~FdListener() {
  if (fd_ >= 0) close(fd_);
}

rcnResult_t FdListener::open(std::string* why) {
  endpoint_.pid = static_cast<int32_t>(getpid());
  endpoint_.token = randomId64();
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) {
    *why = errnoText("socket", errno);
    return rcnSystemError;
  }
  sockaddr_un addr;
  socklen_t len = socketName(endpoint_, &addr);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 64) != 0) {
    *why = errnoText("binding the descriptor-passing socket", errno);
    return rcnSystemError;
  }
  return rcnSuccess;
}

rcnResult_t exchangeFds(const FdListener& listener, int rank, const std::vector<FdEndpoint>& peers,
                        int myFd, Deadline deadline, std::vector<int>* received, std::string* why) {
  const int nranks = static_cast<int>(peers.size());
  received->assign(nranks, -1);
  // Serve every lower rank: they connect, send theirs, receive ours.
  for (int served = 0; served < rank; ++served) {
    int sock = -1, fd = -1;
    FdHeader in{};
    std::string err;
    bool ok = acceptOne(listener.fd(), deadline, &sock, &err) && sameUser(sock, &err) &&
              recvFd(sock, &in, &fd, deadline, &err);
    if (ok && (in.token != listener.endpoint().token || in.rank < 0 || in.rank >= rank ||
               (*received)[in.rank] >= 0)) {
      err = "unexpected connection (wrong token or rank " + std::to_string(in.rank) + ")";
      if (fd >= 0) close(fd);
      ok = false;
    }
    if (ok) {
      FdHeader outHeader{peers[in.rank].token, rank, 0};
      ok = sendFd(sock, outHeader, myFd, deadline, &err);
      if (ok) (*received)[in.rank] = fd;
      else close(fd);
    }
    if (sock >= 0) close(sock);
    if (!ok) {
      *why = "receiving a memory handle from a lower rank: " + err;
      return rcnRemoteError;
    }
  }
  // Then connect to every higher rank.
  for (int peer = rank + 1; peer < nranks; ++peer) {
    int sock = -1, fd = -1;
    FdHeader in{};
    std::string err;
    FdHeader outHeader{peers[peer].token, rank, 0};
    bool ok = connectTo(peers[peer], deadline, &sock, &err) && sameUser(sock, &err) &&
              sendFd(sock, outHeader, myFd, deadline, &err) && recvFd(sock, &in, &fd, deadline, &err);
    if (ok && (in.token != listener.endpoint().token || in.rank != peer)) {
      err = "unexpected reply";
      close(fd);
      ok = false;
    }
    if (sock >= 0) close(sock);
    if (!ok) {
      *why = "exchanging memory handles with rank " + std::to_string(peer) + ": " + err;
      return rcnRemoteError;
    }
    (*received)[peer] = fd;
  }
  return rcnSuccess;
}

}  // namespace rcn
