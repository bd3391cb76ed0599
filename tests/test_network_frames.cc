// SPDX-License-Identifier: BSD-3-Clause
// What a rank makes of the bytes a peer sent, without sockets: the root's
// table of joiners, a root's verdict, the rendezvous's judging and reply,
// the tcp wire's frame headers, hellos and addresses, and the shm wire's
// mapping of a peer's segment. Each case is a message that once passed (or
// crashed) and must now be refused with a reason, next to one that is fine.
#include <catch2/catch_test_macros.hpp>

#include <netinet/in.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/rendezvous_wire.h"
#include "transport/wire/shm_segment.h"
#include "transport/wire/tcp_frame.h"

using namespace rcn;

namespace {

SocketAddress loopback(uint16_t port) {
  SocketAddress addr;
  auto* in = reinterpret_cast<sockaddr_in*>(&addr.storage);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.len = sizeof(sockaddr_in);
  return addr;
}

JoinRequest joinAs(int rank, int nranks, const SocketAddress& listen) {
  JoinRequest request{};
  request.rank = rank;
  request.nranks = nranks;
  request.listen = toWire(listen);
  return request;
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

RendezvousReply acceptedReply(int nranks, const SocketAddress& root) {
  RendezvousReply reply{};
  reply.nranks = nranks;
  BootstrapHandle handle{};
  std::memcpy(handle.addr, &root.storage, root.len);
  handle.addrLen = root.len;
  std::memcpy(reply.id.internal, &handle, sizeof handle);
  return reply;
}

}  // namespace

TEST_CASE("The root's table fills with distinct ranks and usable addresses", "[frames][bootstrap]") {
  JoinTable table(1000);
  table.admit(joinAs(1, 2, loopback(4001)));
  REQUIRE_FALSE(table.complete());
  table.admit(joinAs(0, 2, loopback(4000)));
  REQUIRE(table.complete());
  const std::vector<WireAddress> addresses = table.addressTable();
  REQUIRE(addresses.size() == 2);
  SocketAddress first;
  REQUIRE(fromWire(addresses[0].bytes, addresses[0].len, &first));
  CHECK(first.text() == "127.0.0.1:4000");
}

TEST_CASE("The root refuses a group whose joiner sent no socket address", "[frames][bootstrap]") {
  JoinTable table(1000);
  table.admit(joinAs(0, 2, loopback(4000)));
  table.admit(joinAs(1, 2, SocketAddress{}));
  REQUIRE(table.failed());
  CHECK(table.reply().verdict == kVerdictBadAddress);
  CHECK(table.reply().culprit == 1);
  std::string why;
  CHECK(rootVerdictProblem(table.reply(), 0, 2, nullptr, &why) == rcnRemoteError);
  CHECK(contains(why, "rank 1 sent the root no usable listen address"));
}

TEST_CASE("A single rank needs no listen address", "[frames][bootstrap]") {
  JoinTable table(1000);
  table.admit(joinAs(0, 1, SocketAddress{}));
  CHECK(table.complete());
}

TEST_CASE("A rank reads the root's timeout with the missing ranks, and an unknown verdict as such",
          "[frames][bootstrap]") {
  JoinTable table(250);
  table.admit(joinAs(0, 3, loopback(4000)));
  table.expire();
  const std::vector<char> joined = table.joinedTrailer();
  REQUIRE(joined.size() == rootReplyTrailerBytes(table.reply(), 3));
  std::string why;
  CHECK(rootVerdictProblem(table.reply(), 0, 3, &joined, &why) == rcnRemoteError);
  CHECK(contains(why, "only 1 of 3 ranks joined within 250 ms; missing ranks: 1,2"));
  RootReply odd{};
  odd.verdict = 77;
  CHECK(rootReplyTrailerBytes(odd, 3) == 0);
  CHECK(rootVerdictProblem(odd, 0, 3, nullptr, &why) == rcnRemoteError);
  CHECK(contains(why, "unknown verdict 77"));
}

TEST_CASE("The rendezvous judges joins and a joiner checks rank 0's reply", "[frames][rendezvous]") {
  std::vector<char> taken = {1, 0, 1, 0};
  CHECK(judgeJoin({1, 4}, 4, taken) == kAccepted);
  CHECK(judgeJoin({2, 4}, 4, taken) == kRankTaken);
  CHECK(judgeJoin({4, 4}, 4, taken) == kRankOutOfRange);
  CHECK(judgeJoin({1, 5}, 4, taken) == kOtherSize);

  rcnUniqueId id{};
  std::string why;
  CHECK(readRendezvousReply(acceptedReply(4, loopback(29500)), 1, 4, &id, &why) == rcnSuccess);

  RendezvousReply unknown{};
  unknown.refusal = 9;
  CHECK(readRendezvousReply(unknown, 1, 4, &id, &why) == rcnRemoteError);
  CHECK(contains(why, "unknown refusal 9"));

  CHECK(readRendezvousReply(acceptedReply(4, SocketAddress{}), 1, 4, &id, &why) == rcnRemoteError);
  CHECK(contains(why, "an id without a root address"));
  CHECK(readRendezvousReply(acceptedReply(8, loopback(29500)), 1, 4, &id, &why) == rcnRemoteError);
  CHECK(contains(why, "another world size"));
}

TEST_CASE("The tcp wire takes frames that fit its region and refuses the rest", "[frames][wire]") {
  WireLayout layout;
  layout.regionBytes = 4096;
  layout.flagOffset = 4064;
  layout.flagCount = 8;
  CHECK(judgeFrame({kFrameMagic, kFrameData, 4000, 96}, layout).action == FrameAction::kPayload);
  CHECK(judgeFrame({kFrameMagic, kFrameData, 4000, 97}, layout).action == FrameAction::kRefuse);
  CHECK(judgeFrame({kFrameMagic, kFrameData, 8, UINT64_MAX}, layout).action == FrameAction::kRefuse);
  CHECK(judgeFrame({kFrameMagic, kFrameFlag, 7, 1}, layout).action == FrameAction::kFlag);
  CHECK(judgeFrame({kFrameMagic, kFrameFlag, 8, 1}, layout).action == FrameAction::kRefuse);
  CHECK(judgeFrame({kFrameMagic, kFrameFlag, 0, 1ull << 32}, layout).action == FrameAction::kRefuse);
  CHECK(judgeFrame({kFrameMagic, kFrameAbort, 0, kAbortTextBytes + 1}, layout).action == FrameAction::kRefuse);
  CHECK(judgeFrame({kFrameMagic, kFrameBye, 0, 0}, layout).action == FrameAction::kBye);
  const FrameJudgement stranger = judgeFrame({0x12345678, kFrameData, 0, 0}, layout);
  REQUIRE(stranger.action == FrameAction::kRefuse);
  CHECK(contains(refusedFrameText(1, 0, stranger.bad, {0x12345678, kFrameData, 0, 0}), "bad magic"));
}

TEST_CASE("The tcp wire takes a hello only from a lower rank not yet connected", "[frames][wire]") {
  std::vector<int> connected = {-1, 7, -1, -1};
  std::string why;
  CHECK(helloAcceptable({0, 0}, 2, connected, &why));
  CHECK_FALSE(helloAcceptable({1, 0}, 2, connected, &why));
  CHECK(contains(why, "already connected"));
  CHECK_FALSE(helloAcceptable({2, 0}, 2, connected, &why));
  CHECK_FALSE(helloAcceptable({-5, 0}, 2, connected, &why));
  CHECK(contains(why, "not a lower rank"));
}

TEST_CASE("A peer's listen address must be a socket address", "[frames][wire]") {
  CHECK(peerAddressUsable(loopback(1234)));
  SocketAddress garbage = loopback(1234);
  garbage.len = 200;
  CHECK_FALSE(peerAddressUsable(garbage));
  CHECK_FALSE(peerAddressUsable(SocketAddress{}));
}

TEST_CASE("A peer's shm segment shorter than the layout is refused before it is mapped", "[frames][wire]") {
  WireLayout layout;
  layout.regionBytes = 4096;
  const int fd = memfd_create("rcn-test-segment", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  uint8_t* base = nullptr;
  std::string why;
  REQUIRE(ftruncate(fd, off_t(shmSegmentBytes(layout) - 1)) == 0);
  CHECK(mapShmSegment(fd, layout, 3, &base, &why) == rcnRemoteError);
  CHECK(contains(why, "rank 3's segment holds 4159 bytes, not the 4160"));
  REQUIRE(ftruncate(fd, off_t(shmSegmentBytes(layout))) == 0);
  REQUIRE(mapShmSegment(fd, layout, 3, &base, &why) == rcnSuccess);
  CHECK(*shmGoodbyeWord(base, layout) == 0);
  munmap(base, shmSegmentBytes(layout));
  close(fd);
}
