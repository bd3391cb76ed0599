// SPDX-License-Identifier: BSD-3-Clause
#include "core/rendezvous_wire.h"

#include <cstdio>
#include <cstring>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"

namespace rcn {

RendezvousRefusal judgeJoin(const RendezvousJoin& join, int nranks, const std::vector<char>& taken) {
  if (join.nranks != nranks) return kOtherSize;
  if (join.rank < 1 || join.rank >= nranks) return kRankOutOfRange;
  return taken[static_cast<size_t>(join.rank)] ? kRankTaken : kAccepted;
}

const char* refusalText(RendezvousRefusal refusal) {
  switch (refusal) {
    case kAccepted: return "accepted";
    case kOtherSize: return "the ranks disagree on the world size";
    case kRankOutOfRange: return "no such rank in this world";
    case kRankTaken: return "another process joined as that rank first (two launches on one port?)";
  }
  return "an unknown refusal";
}

rcnResult_t readRendezvousReply(const RendezvousReply& reply, int rank, int nranks, rcnUniqueId* id, std::string* why) {
  char text[256];
  if (reply.refusal != kAccepted) {
    const bool known = reply.refusal >= kOtherSize && reply.refusal <= kRankTaken;
    if (known)
      std::snprintf(text, sizeof text, "rank 0 (a world of %d) refused rank %d of %d: %s", reply.nranks, rank, nranks,
                    refusalText(RendezvousRefusal(reply.refusal)));
    else
      std::snprintf(text, sizeof text, "rank 0 sent an unknown refusal %d to rank %d (another rocenante version?)",
                    reply.refusal, rank);
    *why = text;
    if (!known) return rcnRemoteError;
    return reply.refusal == kOtherSize ? rcnInvalidArgument : rcnInvalidUsage;
  }
  BootstrapHandle handle;
  std::memcpy(&handle, reply.id.internal, sizeof handle);
  SocketAddress root;
  if (reply.nranks != nranks || !fromWire(handle.addr, handle.addrLen, &root)) {
    std::snprintf(text, sizeof text,
                  "rank 0 accepted rank %d of %d but sent %s (another rocenante version, or not rank 0?)", rank, nranks,
                  reply.nranks != nranks ? "another world size" : "an id without a root address");
    *why = text;
    return rcnRemoteError;
  }
  *id = reply.id;
  return rcnSuccess;
}

}  // namespace rcn
