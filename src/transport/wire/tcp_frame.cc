// SPDX-License-Identifier: BSD-3-Clause
#include "transport/wire/tcp_frame.h"

#include <cstdio>

#include "core/bootstrap_wire.h"

namespace rcn {

FrameJudgement judgeFrame(const FrameHeader& h, const WireLayout& layout) {
  if (h.magic != kFrameMagic) return {FrameAction::kRefuse, "bad magic"};
  switch (h.type) {
    case kFrameData:
      if (h.offset > layout.regionBytes || h.length > layout.regionBytes - h.offset)
        return {FrameAction::kRefuse, "data outside the region"};
      return {FrameAction::kPayload, nullptr};
    case kFrameFlag:
      if (h.offset >= layout.flagCount || h.length > UINT32_MAX)
        return {FrameAction::kRefuse, "flag index out of range"};
      return {FrameAction::kFlag, nullptr};
    case kFrameBye: return {FrameAction::kBye, nullptr};
    case kFrameAbort:
      if (h.length > kAbortTextBytes) return {FrameAction::kRefuse, "abort text too long"};
      return {FrameAction::kAbortText, nullptr};
    default: return {FrameAction::kRefuse, "unknown frame type"};
  }
}

std::string refusedFrameText(int rank, int peer, const char* bad, const FrameHeader& h) {
  char text[256];
  std::snprintf(text, sizeof text,
                "tcp wire: rank %d refused a frame from rank %d (%s: type %u offset %llu length %llu)", rank, peer, bad,
                h.type, static_cast<unsigned long long>(h.offset), static_cast<unsigned long long>(h.length));
  return text;
}

bool awaitedLowerRank(int rank, int self, const std::vector<int>& connected) {
  return rank >= 0 && rank < self && static_cast<size_t>(rank) < connected.size() &&
         connected[static_cast<size_t>(rank)] < 0;
}

bool helloAcceptable(const TcpHello& hello, int self, const std::vector<int>& connected, std::string* why) {
  if (awaitedLowerRank(hello.rank, self, connected)) return true;
  const bool lower = hello.rank >= 0 && hello.rank < self;
  *why = "tcp wire: rank " + std::to_string(self) + " dropped a connection with a bad hello (rank " +
         std::to_string(hello.rank) + (lower ? ", already connected)" : ", not a lower rank)");
  return false;
}

bool peerAddressUsable(const SocketAddress& addr) {
  SocketAddress checked;
  return addr.len <= sizeof addr.storage &&
         fromWire(reinterpret_cast<const uint8_t*>(&addr.storage), addr.len, &checked);
}

}  // namespace rcn
