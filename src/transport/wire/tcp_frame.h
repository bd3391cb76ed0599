// SPDX-License-Identifier: BSD-3-Clause
// The tcp wire's frames (transport/wire/tcp_wire.cc) and the receiver's
// checks of what a peer sent: a frame header against this rank's region,
// a connecting peer's hello, a peer's listen address. Without sockets, so
// that the fuzz target fuzz_tcp_wire_frames runs the code a bad frame meets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/socket.h"
#include "transport/wire/wire.h"

namespace rcn {

constexpr uint32_t kFrameMagic = 0x52434e46;  // "RCNF"
enum FrameType : uint32_t { kFrameData = 1, kFrameFlag = 2, kFrameBye = 3, kFrameAbort = 4 };
// The most text an ABORT frame carries (its sender's failure, cut short).
constexpr size_t kAbortTextBytes = 512;

struct FrameHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t offset;  // DATA: byte offset in the region; FLAG: flag index
  uint64_t length;  // DATA: payload bytes; FLAG: the value; ABORT: text bytes
};

// The first message on a connection, after the proof of the key.
struct TcpHello {
  int32_t rank;
  uint32_t pad;
};

// What the receiver does with a frame whose header it read.
enum class FrameAction {
  kPayload,    // read `length` bytes into the region at `offset`
  kFlag,       // store `length` into flag `offset`
  kBye,        // the peer leaves on purpose: nothing more comes
  kAbortText,  // read `length` bytes: why the peer failed
  kRefuse,     // a bad frame: fail the wire with refusedFrameText
};

struct FrameJudgement {
  FrameAction action;
  const char* bad;  // kRefuse: what is wrong; else nullptr
};

// Checks a header against this rank's region: a payload that fits it, a
// flag index below flagCount and a value of 32 bits, a bounded abort text,
// a known type and the magic.
FrameJudgement judgeFrame(const FrameHeader& header, const WireLayout& layout);

// The failure recorded for a refused frame.
std::string refusedFrameText(int rank, int peer, const char* bad, const FrameHeader& header);

// Whether `rank`, named by a connection's hello, is a lower rank than
// `self` not yet connected (connected[r] >= 0 where one is): the one test of
// every mesh whose ranks connect up and accept from below (this wire, the
// verbs wire's exit watch).
bool awaitedLowerRank(int rank, int self, const std::vector<int>& connected);

// awaitedLowerRank for the tcp wire's hello; else *why.
bool helloAcceptable(const TcpHello& hello, int self, const std::vector<int>& connected, std::string* why);

// A peer's listen address as its setup blob carried it, checked: a family
// and length a socket address has.
bool peerAddressUsable(const SocketAddress& addr);

}  // namespace rcn
