// SPDX-License-Identifier: BSD-3-Clause
#include "core/bootstrap_wire.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "core/bootstrap.h"
#include "core/log.h"

namespace rcn {

namespace {

// "0,3,7" (the first 32, then "...").
std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size() && i < 32; ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > 32) text += ",...";
  return text;
}

}  // namespace

WireAddress toWire(const SocketAddress& addr) {
  WireAddress wire{};
  wire.len = addr.len;
  std::memcpy(wire.bytes, &addr.storage, std::min<size_t>(addr.len, sizeof wire.bytes));
  return wire;
}

bool fromWire(const uint8_t* bytes, uint32_t len, SocketAddress* addr) {
  if (len != sizeof(sockaddr_in) && len != sizeof(sockaddr_in6)) return false;
  std::memset(&addr->storage, 0, sizeof addr->storage);
  std::memcpy(&addr->storage, bytes, len);
  addr->len = len;
  int family = addr->storage.ss_family;
  return (family == AF_INET && len == sizeof(sockaddr_in)) || (family == AF_INET6 && len == sizeof(sockaddr_in6));
}

void JoinTable::admit(const JoinRequest& request) {
  // A size past kMaxCommRanks (a stray or broken message) allocates nothing.
  const bool sizeOk = request.nranks >= 1 && request.nranks <= kMaxCommRanks;
  if (nranks_ < 0 && sizeOk) {
    nranks_ = request.nranks;
    joined_.assign(static_cast<size_t>(nranks_), 0);
  }
  requests_.push_back(request);
  reply_.nranks = nranks_;
  reply_.joined = static_cast<int32_t>(requests_.size());
  if (failed()) return;  // the first problem is the one reported
  SocketAddress listen;
  if (!sizeOk) {
    reply_.verdict = kVerdictSizeMismatch;
    reply_.culprit = request.rank;
    reply_.culpritSize = request.nranks;
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: rank %d says the communicator has %d ranks; it may have 1 to %d",
             request.rank, request.nranks, kMaxCommRanks);
  } else if (request.nranks != nranks_ || request.rank < 0 || request.rank >= nranks_) {
    reply_.verdict = kVerdictSizeMismatch;
    reply_.culprit = request.rank;
    reply_.culpritSize = request.nranks;
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: a joiner says it is rank %d of %d; earlier ranks said %d ranks",
             request.rank, request.nranks, nranks_);
  } else if (joined_[request.rank]) {
    reply_.verdict = kVerdictDuplicateRank;
    reply_.culprit = request.rank;
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: two processes joined as rank %d", request.rank);
  } else if (nranks_ > 1 && !fromWire(request.listen.bytes, request.listen.len, &listen)) {
    // Its ring neighbour could not reach it: the group fails now, naming it.
    reply_.verdict = kVerdictBadAddress;
    reply_.culprit = request.rank;
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: rank %d sent a listen address of %u bytes that is no socket address",
             request.rank, request.listen.len);
  } else {
    joined_[request.rank] = 1;
  }
}

void JoinTable::expire() {
  if (failed() || nranks_ <= 0) return;
  reply_.verdict = kVerdictTimeout;
  RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap root: only %zu of %d ranks joined within %lld ms", requests_.size(), nranks_,
           static_cast<long long>(reply_.timeoutMs));
}

std::vector<char> JoinTable::joinedTrailer() const {
  return reply_.verdict == kVerdictTimeout ? joined_ : std::vector<char>();
}

std::vector<WireAddress> JoinTable::addressTable() const {
  if (!complete()) return {};
  std::vector<WireAddress> table(static_cast<size_t>(nranks_));
  for (const JoinRequest& r : requests_) table[static_cast<size_t>(r.rank)] = r.listen;
  return table;
}

size_t rootReplyTrailerBytes(const RootReply& reply, int nranks) {
  if (reply.verdict == kVerdictOk) return static_cast<size_t>(nranks) * sizeof(WireAddress);
  // The root only times out a group whose size matches ours.
  if (reply.verdict == kVerdictTimeout && reply.nranks == nranks) return static_cast<size_t>(nranks);
  return 0;
}

rcnResult_t rootVerdictProblem(const RootReply& r, int rank, int nranks, const std::vector<char>* joined,
                               std::string* why) {
  char text[320];
  rcnResult_t res = rcnInvalidUsage;
  switch (r.verdict) {
    case kVerdictSizeMismatch:
      std::snprintf(text, sizeof text,
                    "ranks disagree on the communicator: a joiner said it is rank %d of %d, the first ranks said %d "
                    "ranks (rank %d gives up)",
                    r.culprit, r.culpritSize, r.nranks, rank);
      break;
    case kVerdictDuplicateRank:
      std::snprintf(text, sizeof text, "two processes joined as rank %d (rank %d gives up)", r.culprit, rank);
      break;
    case kVerdictBadAddress:
      std::snprintf(text, sizeof text, "rank %d sent the root no usable listen address (rank %d gives up)", r.culprit,
                    rank);
      res = rcnRemoteError;
      break;
    case kVerdictTimeout: {
      std::string missingText = "unknown";
      if (joined && r.nranks == nranks && joined->size() == static_cast<size_t>(nranks)) {
        std::vector<int> missing;
        for (int i = 0; i < nranks; ++i)
          if (!(*joined)[static_cast<size_t>(i)]) missing.push_back(i);
        missingText = rankList(missing);
      }
      std::snprintf(text, sizeof text,
                    "only %d of %d ranks joined within %lld ms; missing ranks: %s (rank %d gives up)", r.joined,
                    r.nranks, static_cast<long long>(r.timeoutMs), missingText.c_str(), rank);
      res = rcnRemoteError;
      break;
    }
    default: std::snprintf(text, sizeof text, "the root sent an unknown verdict %d", r.verdict); res = rcnRemoteError;
  }
  *why = text;
  return res;
}

bool sameCall(const CallHeader& mine, const CallHeader& theirs, int rank, int prev, std::string* why) {
  if (theirs.call == mine.call && theirs.bytes == mine.bytes) return true;
  char text[256];
  std::snprintf(text, sizeof text,
                "rank %d is in all-gather #%llu of %llu bytes, but rank %d is in all-gather #%llu "
                "of %llu bytes",
                rank, static_cast<unsigned long long>(mine.call), static_cast<unsigned long long>(mine.bytes), prev,
                static_cast<unsigned long long>(theirs.call), static_cast<unsigned long long>(theirs.bytes));
  *why = text;
  return false;
}

}  // namespace rcn
