// SPDX-License-Identifier: BSD-3-Clause
// What the tcp wire reads from a peer (transport/wire/tcp_frame.h): the
// frames of a connection, applied to a region exactly as long as the layout
// says (so a write past it is ASan's finding), then a connecting peer's
// hello and a peer's listen address. The input:
//   u16 regionBytes, u8 flagCount, then frames (FrameHeader, then the
//   payload or abort text it announces) until BYE, ABORT, a refusal or the
//   end; a refused or ended stream is followed by u8 self, TcpHello x 4,
//   SocketAddress.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "transport/wire/tcp_frame.h"

namespace {

using rcn::fuzz::ByteReader;

// Runs frames against the region until the connection would end.
void frames(ByteReader* in) {
  uint16_t regionBytes = 0;
  if (!in->take(&regionBytes)) return;
  rcn::WireLayout layout;
  layout.flagCount = in->byte() % 64;
  // The flags lie at the region's end, as the exchange layouts put them.
  layout.regionBytes = regionBytes + layout.flagCount * sizeof(uint32_t);
  layout.flagOffset = regionBytes;
  std::vector<uint8_t> region(layout.regionBytes);
  for (int n = 0; n < 256; ++n) {
    rcn::FrameHeader h;
    if (!in->take(&h)) return;
    const rcn::FrameJudgement judged = rcn::judgeFrame(h, layout);
    switch (judged.action) {
      case rcn::FrameAction::kPayload:
        if (!in->takeBytes(region.data() + h.offset, h.length)) return;  // truncated payload
        break;
      case rcn::FrameAction::kFlag: {
        auto* flags = reinterpret_cast<uint32_t*>(region.data() + layout.flagOffset);
        __atomic_store_n(&flags[h.offset], uint32_t(h.length), __ATOMIC_RELEASE);
        break;
      }
      case rcn::FrameAction::kBye: return;
      case rcn::FrameAction::kAbortText: {
        std::string text(size_t(h.length), '\0');
        (void)in->takeBytes(text.data(), text.size());
        return;
      }
      case rcn::FrameAction::kRefuse:
        if (!judged.bad || rcn::refusedFrameText(1, 0, judged.bad, h).empty()) abort();
        return;
    }
  }
}

void hellos(ByteReader* in) {
  const int self = 1 + in->byte() % 8;
  std::vector<int> connected(static_cast<size_t>(self + 1), -1);
  for (int i = 0; i < 4; ++i) {
    rcn::TcpHello hello;
    if (!in->take(&hello)) return;
    std::string why;
    if (!rcn::helloAcceptable(hello, self, connected, &why)) {
      if (why.empty()) abort();
      continue;
    }
    if (hello.rank < 0 || hello.rank >= self) abort();
    connected.at(static_cast<size_t>(hello.rank)) = 3;  // as the wire stores the connection's fd
  }
}

void address(ByteReader* in) {
  rcn::SocketAddress addr;
  if (!in->take(&addr)) return;
  if (rcn::peerAddressUsable(addr) && addr.len > sizeof addr.storage) abort();
  (void)addr.text();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = setenv("ROCENANTE_DEBUG", "NONE", 1) == 0;
  (void)quiet;
  ByteReader in(data, size);
  frames(&in);
  hellos(&in);
  address(&in);
  return 0;
}
