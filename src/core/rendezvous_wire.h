// SPDX-License-Identifier: BSD-3-Clause
// The MASTER_ADDR/MASTER_PORT rendezvous's messages (core/bootstrap_env.cc)
// and what each side makes of the other's bytes: rank 0 judges a join, a
// joiner reads rank 0's reply. Without sockets, so that fuzz_rendezvous_frames
// runs the code a bad message meets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn {

// What a joiner sends rank 0 (after its proof of the launch's key).
struct RendezvousJoin {
  int32_t rank;
  int32_t nranks;
};

// Why rank 0 refused a join (RendezvousReply::refusal).
enum RendezvousRefusal : int32_t { kAccepted = 0, kOtherSize = 1, kRankOutOfRange = 2, kRankTaken = 3 };

struct RendezvousReply {
  int32_t refusal;  // kAccepted: id is valid
  int32_t nranks;   // the size rank 0 runs with
  rcnUniqueId id;
};

// Rank 0's answer to a join in a world of `nranks`; `taken` has a 1 for
// every rank already given the id (nranks entries).
RendezvousRefusal judgeJoin(const RendezvousJoin& join, int nranks, const std::vector<char>& taken);

// What a refusal means, for both sides' messages.
const char* refusalText(RendezvousRefusal refusal);

// What joiner `rank` of `nranks` makes of rank 0's reply: rcnSuccess and
// *id when it was accepted with an id that names a root; else the error and
// *why (an unknown refusal or an id without a root address is rank 0's
// message gone wrong, never an id to use).
rcnResult_t readRendezvousReply(const RendezvousReply& reply, int rank, int nranks, rcnUniqueId* id, std::string* why);

}  // namespace rcn
