// SPDX-License-Identifier: BSD-3-Clause
// The TCP bootstrap's messages (core/bootstrap_tcp.cc) and what a receiver
// makes of them: every field a peer sent is checked here, in functions
// without sockets, so that the code a bad message meets is the code the
// fuzz target fuzz_bootstrap_frames runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/socket.h"
#include "rocenante/rocenante.h"

namespace rcn {

struct WireAddress {
  uint32_t len;
  uint8_t bytes[64];
};

// What a rank sends the root (after proving the id's secret).
struct JoinRequest {
  int32_t rank;
  int32_t nranks;
  WireAddress listen;  // where this rank accepts its ring neighbour (unused for one rank)
};

enum BootstrapVerdict : int32_t {
  kVerdictOk = 0,       // followed by nranks WireAddress
  kVerdictTimeout = 2,  // followed by nranks bytes: 1 where that rank joined
  kVerdictSizeMismatch = 3,
  kVerdictDuplicateRank = 4,
  kVerdictBadAddress = 5,  // a rank sent a listen address that is no socket address
};

// The root's answer to every joiner.
struct RootReply {
  int32_t verdict;
  int32_t nranks;       // the size the root holds (set by the first joiner)
  int32_t joined;       // how many ranks had joined
  int32_t culprit;      // kVerdictSizeMismatch / kVerdictDuplicateRank / kVerdictBadAddress: the rank at fault
  int32_t culpritSize;  // kVerdictSizeMismatch: the size that rank gave
  int32_t pad;
  int64_t timeoutMs;  // the root's bound, for messages
};

// The first message on a ring connection (after the proof), so a rank knows who connected.
struct RingHello {
  int32_t rank;
  int32_t pad;
};

// Sent before each all-gather so ranks that call it out of step, or with
// different sizes, fail with a clear message instead of mixing up bytes.
struct CallHeader {
  uint64_t call;
  uint64_t bytes;
};

WireAddress toWire(const SocketAddress& addr);
// False when the bytes cannot be a socket address (a corrupt id or message).
bool fromWire(const uint8_t* bytes, uint32_t len, SocketAddress* addr);

// The root's book of the joiners of one group: the first valid request sets
// the size; a request that disagrees with it, repeats a rank or carries no
// usable address makes the group fail, with reply() saying why.
class JoinTable {
 public:
  // timeoutMs: the root's bound, which every reply names.
  explicit JoinTable(int64_t timeoutMs) { reply_.timeoutMs = timeoutMs; }
  void admit(const JoinRequest& request);
  bool failed() const { return reply_.verdict != kVerdictOk; }
  bool complete() const { return !failed() && nranks_ > 0 && static_cast<int>(requests_.size()) == nranks_; }
  // The group did not fill in time: the verdict becomes kVerdictTimeout.
  void expire();
  int nranks() const { return nranks_; }
  size_t size() const { return requests_.size(); }
  const RootReply& reply() const { return reply_; }
  // kVerdictTimeout's trailer: a byte per rank, 1 where it joined; empty otherwise.
  std::vector<char> joinedTrailer() const;
  // kVerdictOk's trailer: every rank's listen address, in rank order (complete() only).
  std::vector<WireAddress> addressTable() const;

 private:
  int nranks_ = -1;
  std::vector<JoinRequest> requests_;
  std::vector<char> joined_;  // per rank: 1 once it joined
  RootReply reply_{};
};

// How many bytes follow `reply` for a rank of `nranks`: the table, the
// joined bytes, or nothing.
size_t rootReplyTrailerBytes(const RootReply& reply, int nranks);

// What a rank of `nranks` makes of a reply that is not kVerdictOk: the
// error it returns and, in *why, the message it logs. joined: the bytes
// that followed a kVerdictTimeout, or nullptr where they could not be read.
rcnResult_t rootVerdictProblem(const RootReply& reply, int rank, int nranks, const std::vector<char>* joined,
                               std::string* why);

// Whether the all-gather header from the previous rank matches ours; else *why.
bool sameCall(const CallHeader& mine, const CallHeader& theirs, int rank, int prev, std::string* why);

}  // namespace rcn
