// Who a rank is, as far as wires care: which host (boot id + hostname, so two
// containers on one kernel count as one host), which pid namespace, which pid.
#pragma once

#include <cstdint>

namespace rcn {

struct PeerIdentity {
  uint64_t hostHash = 0;
  uint64_t pidNamespace = 0;  // inode of /proc/self/ns/pid, 0 if unknown
  int32_t pid = 0;
  int32_t hasRdmaDevice = 0;
};

PeerIdentity localPeerIdentity();

// True when the process exists and is not a zombie. Only meaningful for a
// peer on this host in this pid namespace.
bool processAlive(int32_t pid);

// 64 random bits (for names that must not collide across communicators).
uint64_t randomId64();

}  // namespace rcn
