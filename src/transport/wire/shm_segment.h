// SPDX-License-Identifier: BSD-3-Clause
// A shm wire segment (transport/wire/shm_wire.cc): a rank's exchange region
// then its goodbye word, in a POSIX shared-memory object every peer maps.
// What a rank trusts of a peer's segment is checked here: its size before
// it is mapped (a shorter object would turn the first access past its end
// into SIGBUS), and the goodbye word only ever read as zero or not. The
// fuzz target fuzz_shm_wire_segment maps fuzzed objects through this code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "rocenante/rocenante.h"
#include "transport/wire/wire.h"

namespace rcn {

// The segment's tail past the region: the goodbye word, on a line of its own.
constexpr size_t kShmGoodbyeBytes = 64;

inline size_t shmSegmentBytes(const WireLayout& layout) { return layout.regionBytes + kShmGoodbyeBytes; }

// Maps rank `peer`'s segment, open on fd, read-write and shared; refuses an
// object whose size is not the layout's segment (another communicator's,
// or one its owner never sized) with a message naming the rank.
rcnResult_t mapShmSegment(int fd, const WireLayout& layout, int peer, uint8_t** base, std::string* why);

// Where a segment's goodbye word lies.
inline uint32_t* shmGoodbyeWord(uint8_t* base, const WireLayout& layout) {
  return reinterpret_cast<uint32_t*>(base + layout.regionBytes);
}

}  // namespace rcn
