// SPDX-License-Identifier: BSD-3-Clause
// What the TCP bootstrap reads from its sockets (core/bootstrap_wire.h):
// the root's join requests, one after another into one table; then a rank's
// reading of the root's reply and what follows it; then the all-gather
// header from the previous rank; last, what a listener sends a rank that
// connects to it during the handshake every connection starts with
// (core/auth.h), fed to the real client over a socketpair. The input is
// those messages back to back:
//   u8 requests, JoinRequest x requests, u8 rank, u8 nranks, RootReply,
//   trailer bytes, CallHeader x 2, the listener's bytes (at most 64)
// A table that completes must name every rank once, with usable addresses;
// a listener that does not hold the key never completes a handshake.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/auth.h"
#include "core/bootstrap_wire.h"
#include "core/deadline.h"
#include "fuzz_input.h"

namespace {

using rcn::fuzz::ByteReader;

void joinTable(ByteReader* in) {
  rcn::JoinTable table(1000);
  const int requests = in->byte() % 16;
  for (int i = 0; i < requests && !table.complete() && !table.failed(); ++i) {
    rcn::JoinRequest request;
    if (!in->take(&request)) break;
    table.admit(request);
  }
  if (table.complete()) {
    const std::vector<rcn::WireAddress> addresses = table.addressTable();
    if (addresses.size() != static_cast<size_t>(table.nranks()) || table.size() != addresses.size()) abort();
    rcn::SocketAddress addr;
    for (const rcn::WireAddress& a : addresses)
      if (table.nranks() > 1 && !rcn::fromWire(a.bytes, a.len, &addr)) abort();
    return;
  }
  table.expire();
  const rcn::RootReply& reply = table.reply();
  if (table.nranks() > 0 && reply.verdict == rcn::kVerdictOk) abort();  // an incomplete group is no success
  if (reply.verdict == rcn::kVerdictTimeout && table.joinedTrailer().size() != static_cast<size_t>(table.nranks()))
    abort();
}

void rootReply(ByteReader* in) {
  const int nranks = 1 + in->byte() % 64;
  const int rank = in->byte() % nranks;
  rcn::RootReply reply;
  if (!in->take(&reply)) return;
  const size_t trailer = rcn::rootReplyTrailerBytes(reply, nranks);
  if (reply.verdict == rcn::kVerdictOk) {
    std::vector<rcn::WireAddress> table(static_cast<size_t>(nranks));
    if (trailer != table.size() * sizeof(rcn::WireAddress)) abort();
    if (!in->takeBytes(table.data(), trailer)) return;
    rcn::SocketAddress next;
    (void)rcn::fromWire(table[(rank + 1) % nranks].bytes, table[(rank + 1) % nranks].len, &next);
    return;
  }
  std::vector<char> joined(trailer);
  const bool heard = !joined.empty() && in->takeBytes(joined.data(), joined.size());
  std::string why;
  if (rcn::rootVerdictProblem(reply, rank, nranks, heard ? &joined : nullptr, &why) == rcnSuccess || why.empty())
    abort();  // a failure verdict is an error that says why
}

void callHeaders(ByteReader* in) {
  rcn::CallHeader mine, theirs;
  if (!in->take(&mine) || !in->take(&theirs)) return;
  std::string why;
  const bool same = rcn::sameCall(mine, theirs, 1, 0, &why);
  if (same != (mine.call == theirs.call && mine.bytes == theirs.bytes) || (!same && why.empty())) abort();
}

// The listener's Challenge and Verdict (64 bytes when whole) as the
// client reads them; the socket ends after them, so no read waits.
void handshake(ByteReader* in) {
  uint8_t heard[64];
  const size_t bytes = std::min(in->left(), sizeof heard);
  (void)in->takeBytes(heard, bytes);
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ends) != 0) abort();
  if (write(ends[1], heard, bytes) != ssize_t(bytes)) abort();
  shutdown(ends[1], SHUT_WR);
  const rcn::RingHello hello{1, 0};
  std::string why;
  const rcnResult_t res = rcn::authConnect(ends[0], rcn::AuthKey{"fuzz"}, "bootstrap-ring", &hello, sizeof hello,
                                           rcn::deadlineAfterMs(1000), &why);
  if (res == rcnSuccess || why.empty()) abort();
  close(ends[0]);
  close(ends[1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = setenv("ROCENANTE_DEBUG", "NONE", 1) == 0;
  (void)quiet;
  ByteReader in(data, size);
  joinTable(&in);
  rootReply(&in);
  callHeaders(&in);
  handshake(&in);
  return 0;
}
