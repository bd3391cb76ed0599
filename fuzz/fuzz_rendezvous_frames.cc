// SPDX-License-Identifier: BSD-3-Clause
// What the MASTER_ADDR/MASTER_PORT rendezvous reads from its connections
// (core/rendezvous_wire.h): rank 0 judges joins one after another, as its
// serving loop does, then a joiner reads rank 0's reply. The input:
//   u8 nranks, u8 joins, RendezvousJoin x joins, u8 rank, RendezvousReply
// No rank may be given the id twice or out of range, and an accepted reply
// must carry an id the TCP bootstrap can use.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/rendezvous_wire.h"
#include "fuzz_input.h"

namespace {

using rcn::fuzz::ByteReader;

void serve(ByteReader* in, int nranks) {
  std::vector<char> taken(static_cast<size_t>(nranks), 0);
  taken[0] = 1;
  const int joins = in->byte() % 32;
  for (int i = 0; i < joins; ++i) {
    rcn::RendezvousJoin join;
    if (!in->take(&join)) return;
    const rcn::RendezvousRefusal verdict = rcn::judgeJoin(join, nranks, taken);
    if (verdict != rcn::kAccepted) {
      if (std::strcmp(rcn::refusalText(verdict), "accepted") == 0) abort();
      continue;
    }
    if (join.nranks != nranks || join.rank < 1 || join.rank >= nranks || taken[static_cast<size_t>(join.rank)]) abort();
    taken[static_cast<size_t>(join.rank)] = 1;
  }
}

void join(ByteReader* in, int nranks) {
  const int rank = 1 + in->byte() % (nranks - 1);
  rcn::RendezvousReply reply;
  if (!in->take(&reply)) return;
  rcnUniqueId id;
  std::memset(&id, 0xa5, sizeof id);  // poisoned: only an accepted reply writes it
  std::string why;
  const rcnResult_t res = rcn::readRendezvousReply(reply, rank, nranks, &id, &why);
  if (res != rcnSuccess) {
    // An unknown refusal is rank 0's message gone wrong, not this rank's usage.
    const bool known = reply.refusal >= rcn::kOtherSize && reply.refusal <= rcn::kRankTaken;
    if (why.empty() || (!known && res != rcnRemoteError)) abort();
    return;
  }
  rcn::BootstrapHandle handle;
  std::memcpy(&handle, id.internal, sizeof handle);
  rcn::SocketAddress root;
  if (reply.refusal != rcn::kAccepted || reply.nranks != nranks || std::memcmp(&id, &reply.id, sizeof id) != 0 ||
      !rcn::fromWire(handle.addr, handle.addrLen, &root))
    abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = setenv("ROCENANTE_DEBUG", "NONE", 1) == 0;
  (void)quiet;
  ByteReader in(data, size);
  const int nranks = 2 + in.byte() % 63;
  serve(&in, nranks);
  join(&in, nranks);
  return 0;
}
