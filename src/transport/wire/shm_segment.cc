// SPDX-License-Identifier: BSD-3-Clause
#include "transport/wire/shm_segment.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace rcn {

rcnResult_t mapShmSegment(int fd, const WireLayout& layout, int peer, uint8_t** base, std::string* why) {
  const size_t bytes = shmSegmentBytes(layout);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    *why = "fstat of rank " + std::to_string(peer) + "'s segment failed: " + strerror(err);
    return rcnSystemError;
  }
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    *why = "rank " + std::to_string(peer) + "'s segment holds " + std::to_string(st.st_size) + " bytes, not the " +
           std::to_string(bytes) + " of this communicator's layout";
    return rcnRemoteError;
  }
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) {
    const int err = errno;
    *why = "mmap of rank " + std::to_string(peer) + "'s segment failed: " + strerror(err);
    return rcnSystemError;
  }
  *base = static_cast<uint8_t*>(mapped);
  return rcnSuccess;
}

}  // namespace rcn
