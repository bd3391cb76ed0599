// SPDX-License-Identifier: BSD-3-Clause
// What the shm wire trusts of its peers (transport/wire/shm_segment.h,
// peer_identity.h): a peer's shared-memory object, mapped through the code
// the wire maps it with, and the identities the setup blobs carried. The
// object is a memfd of the size and contents the input gives, so one that
// is shorter than the layout must be refused before a read past its end
// raises SIGBUS. The input:
//   u16 regionBytes, i16 sizeChange, u8 nranks, u8 self, PeerIdentity x nranks,
//   then the object's bytes
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "transport/wire/peer_identity.h"
#include "transport/wire/shm_segment.h"

namespace {

using rcn::fuzz::ByteReader;

// One object for the whole run: resized and rewritten for each input.
int segmentFd() {
  static const int fd = memfd_create("rcn-fuzz-shm", MFD_CLOEXEC);
  if (fd < 0) {
    perror("memfd_create");
    abort();
  }
  return fd;
}

void mapSegment(ByteReader* in, uint16_t regionBytes, int16_t sizeChange) {
  rcn::WireLayout layout;
  layout.regionBytes = regionBytes;
  const int64_t objectBytes = std::max<int64_t>(0, int64_t(rcn::shmSegmentBytes(layout)) + sizeChange);
  const int fd = segmentFd();
  std::vector<uint8_t> contents(std::min<size_t>(in->left(), size_t(objectBytes)));
  (void)in->takeBytes(contents.data(), contents.size());
  if (ftruncate(fd, 0) != 0 || ftruncate(fd, objectBytes) != 0 ||
      pwrite(fd, contents.data(), contents.size(), 0) != ssize_t(contents.size())) {
    perror("fuzz_shm_wire_segment: sizing the object");
    abort();
  }
  uint8_t* base = nullptr;
  std::string why;
  const rcnResult_t res = rcn::mapShmSegment(fd, layout, 1, &base, &why);
  if ((res == rcnSuccess) != (objectBytes == int64_t(rcn::shmSegmentBytes(layout)))) abort();
  if (res != rcnSuccess) {
    if (why.empty()) abort();
    return;
  }
  // What a rank reads of a peer's segment: its goodbye word, and every byte
  // of its region a put landed in.
  volatile uint32_t goodbye = __atomic_load_n(rcn::shmGoodbyeWord(base, layout), __ATOMIC_ACQUIRE);
  (void)goodbye;
  uint64_t sum = 0;
  for (size_t i = 0; i < rcn::shmSegmentBytes(layout); ++i) sum += base[i];
  volatile uint64_t sink = sum;
  (void)sink;
  munmap(base, rcn::shmSegmentBytes(layout));
}

void watchPeers(ByteReader* in, int nranks, int self) {
  std::vector<rcn::PeerIdentity> peers(static_cast<size_t>(nranks));
  for (rcn::PeerIdentity& p : peers)
    if (!in->take(&p)) return;
  rcn::PeerExitWatch watch;
  std::string why;
  if (watch.watch(peers, self, "shm", &why) != rcnSuccess) {
    if (why.empty()) abort();
    return;
  }
  (void)watch.check([nranks](int peer) { return peer >= 0 && peer < nranks; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = setenv("ROCENANTE_DEBUG", "NONE", 1) == 0;
  (void)quiet;
  ByteReader in(data, size);
  uint16_t regionBytes = 0;
  int16_t sizeChange = 0;
  if (!in.take(&regionBytes) || !in.take(&sizeChange)) return 0;
  const int nranks = 1 + in.byte() % 8;
  const int self = in.byte() % nranks;
  watchPeers(&in, nranks, self);
  mapSegment(&in, regionBytes, sizeChange);
  return 0;
}
