// SPDX-License-Identifier: BSD-3-Clause
// Passing file descriptors (cuMem export handles) between the processes of
// one host: each rank listens on an abstract-namespace Unix socket named after
// its pid and a random token, and sends its descriptor with SCM_RIGHTS.
// Every step is bounded by a deadline, and a connection from a process of
// another user is refused (abstract sockets have no permissions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/socket.h"
#include "rocenante/rocenante.h"

namespace rcn {

// How to reach one rank's listener; exchanged over the bootstrap.
struct FdEndpoint {
  int32_t pid = 0;
  uint64_t token = 0;  // random; also proves the connector learned it from the bootstrap
};

class FdListener {
 public:
  FdListener() = default;
  FdListener(const FdListener&) = delete;
  FdListener& operator=(const FdListener&) = delete;
  ~FdListener();

  // Binds and listens; endpoint() then describes it.
  rcnResult_t open(std::string* why);
  const FdEndpoint& endpoint() const { return endpoint_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  FdEndpoint endpoint_;
};

// Gives myFd to every other rank and receives theirs: received[r] is rank r's
// descriptor (-1 for this rank, and for a rank that gave -1: it had none, but
// still served its peers, so the exchange completes). Lower ranks connect to higher ones, and each
// rank first serves every lower rank, so no two ranks wait on each other.
// The caller closes the received descriptors.
rcnResult_t exchangeFds(const FdListener& listener, int rank, const std::vector<FdEndpoint>& peers,
                        int myFd, Deadline deadline, std::vector<int>* received, std::string* why);

}  // namespace rcn
