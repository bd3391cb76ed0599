// SPDX-License-Identifier: BSD-3-Clause
// Small TCP helpers for the bootstrap. Every call that waits takes a deadline
// and polls non-blocking sockets, so no wait outlives it; sends use
// MSG_NOSIGNAL, so a dead peer gives an error, never SIGPIPE.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/deadline.h"
#include "rocenante/rocenante.h"

namespace rcn {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;

  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&storage); }
  // "10.1.2.3:4567" or "[fe80::1]:4567", for messages.
  std::string text() const;
};

// Picks the address a bootstrap socket listens on: the first interface whose
// name matches ROCENANTE_SOCKET_IFNAME (else NCCL_SOCKET_IFNAME), else the first
// up, non-loopback, non-docker IPv4 interface, else 127.0.0.1. An interface
// list follows NCCL's syntax: comma-separated name prefixes, '^' to exclude,
// '=' for exact names. Fails with rcnInvalidArgument when a list matches nothing.
rcnResult_t socketPickListenAddress(SocketAddress* addr);

// Whether ROCENANTE_SOCKET_IFNAME or NCCL_SOCKET_IFNAME names the interface.
bool socketIfnameSet();

// Whether addr is an IPv4 loopback address (127.0.0.0/8: all reach lo).
bool socketIsLoopback(const SocketAddress& addr);

// Whether addr's host is one of this machine's: an address of an up
// interface, or a loopback address.
bool socketIsLocalAddress(const SocketAddress& addr);

// A non-blocking listening socket on addr's host at a port the kernel picks;
// bound receives the address peers connect to.
rcnResult_t socketListen(const SocketAddress& addr, int* fd, SocketAddress* bound);

// The I/O calls below return rcnSuccess, rcnRemoteError (deadline passed, peer
// closed or reset the connection, peer refused) or rcnSystemError (a local
// syscall failed); why receives a short reason for the caller's message,
// exactly "timed out" when the deadline passed (bytes that had arrived by
// then are still taken).

// Connects to addr, retrying refused or unreachable attempts until the
// deadline (the peer may not be listening yet). fd is non-blocking.
rcnResult_t socketConnect(const SocketAddress& addr, Deadline deadline, int* fd, std::string* why);

// Accepts one connection on a listening socket; fd is non-blocking. (The
// bootstrap and wires accept through AuthListener, core/auth.h, instead.)
rcnResult_t socketAccept(int listenFd, Deadline deadline, int* fd, std::string* why);

// One accept4 without waiting: a non-blocking connection with Nagle off, as
// every connection socketConnect makes; or -1 with errno, where *retry says
// whether listening may go on (none waiting, or a connection that failed on
// its own, accept(2)).
int acceptWaiting(int listenFd, bool* retry);

rcnResult_t socketSendAll(int fd, const void* data, size_t bytes, Deadline deadline, std::string* why);
rcnResult_t socketRecvAll(int fd, void* data, size_t bytes, Deadline deadline, std::string* why);

// Sends bytes on sendFd while receiving as many on recvFd, progressing both as
// they become ready, so a ring of ranks never deadlocks on full socket buffers.
// On failure, *failedSide is 's' or 'r' for the direction that failed.
rcnResult_t socketSendRecv(int sendFd, const void* sendData, int recvFd, void* recvData,
                           size_t bytes, Deadline deadline, std::string* why, char* failedSide);

// Closes *fd if open and sets it to -1.
void socketClose(int* fd);

}  // namespace rcn
