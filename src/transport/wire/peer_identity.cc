// SPDX-License-Identifier: BSD-3-Clause
#include "transport/wire/peer_identity.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "transport/wire/wire.h"

namespace rcn {

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string readSmallFile(const char* path) {
  std::string text;
  FILE* f = std::fopen(path, "r");
  if (!f) return text;
  char buf[256];
  size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  text.assign(buf, n);
  return text;
}

}  // namespace

PeerIdentity localPeerIdentity() {
  PeerIdentity id;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  id.hostHash = fnv1a(readSmallFile("/proc/sys/kernel/random/boot_id") + "|" + host);
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) == 0) id.pidNamespace = uint64_t(st.st_ino);
  id.pid = int32_t(getpid());
  id.hasRdmaDevice = verbsDeviceAvailable() ? 1 : 0;
  return id;
}

bool processAlive(int32_t pid) {
  if (pid <= 0) return true;  // unknown: do not declare it dead
  if (kill(pid, 0) == -1 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::string stat = readSmallFile(path);
  // The state letter follows the ')' that closes the command name.
  size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return true;
  char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

rcnResult_t PeerExitWatch::watch(const std::vector<PeerIdentity>& peers, int self, const char* wire,
                                 std::string* why) {
  watched_.clear();
  for (int r = 0; r < int(peers.size()); ++r) {
    if (peers[r].hostHash == peers[self].hostHash) continue;
    *why = std::string(wire) + " wire: rank " + std::to_string(r) + " is on another host";
    return rcnInvalidUsage;
  }
  // Another pid namespace's pids mean nothing here: only this one's peers
  // can be watched.
  for (int r = 0; r < int(peers.size()); ++r)
    if (r != self && peers[r].pidNamespace == peers[self].pidNamespace) watched_.push_back({r, peers[r].pid});
  wire_ = wire;
  return rcnSuccess;
}

std::string PeerExitWatch::check(const std::function<bool(int)>& leftOnPurpose) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(20)) return "";
  last_ = now;
  for (size_t i = 0; i < watched_.size();) {
    const WatchedPeer p = watched_[i];
    if (processAlive(p.pid)) {
      ++i;
    } else if (leftOnPurpose && leftOnPurpose(p.rank)) {
      watched_.erase(watched_.begin() + long(i));
    } else {
      return std::string(wire_) + " wire: rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) + ") exited";
    }
  }
  return "";
}

uint64_t randomId64() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^ (uint64_t(getpid()) << 16);
}

}  // namespace rcn
