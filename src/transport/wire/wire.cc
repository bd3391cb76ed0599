// SPDX-License-Identifier: BSD-3-Clause
// Choosing a wire. The choice uses only what every rank gathered, so every
// rank makes the same one.
#include "transport/wire/wire.h"

#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/log.h"
#include "core/params.h"
#include "transport/wire/peer_identity.h"

namespace rcn {

bool WireFailure::record(const std::string& text, bool logged) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.load()) return false;
    text_ = text;
    failed_.store(true, std::memory_order_release);
  }
  if (!logged) RCN_WARN(RCN_LOG_TRANSPORT, "%s", text.c_str());
  return true;
}

rcnResult_t Wire::checkPeer(int peer) const {
  if (stopped()) return rcnRemoteError;
  RCN_ARG_CHECK(peer >= 0 && peer < nranks_ && peer != rank_, "%s wire: bad peer %d", name(), peer);
  return rcnSuccess;
}

rcnResult_t Wire::checkPut(int peer, size_t local, size_t remote, size_t bytes) const {
  RCN_CHECK(checkPeer(peer));
  const size_t limit = layout_.regionBytes;
  RCN_ARG_CHECK(local <= limit && bytes <= limit - local && remote <= limit && bytes <= limit - remote,
                "%s wire: put of %zu bytes at %zu -> %zu outside the %zu-byte region", name(), bytes, local, remote,
                limit);
  return rcnSuccess;
}

rcnResult_t Wire::checkPutFlag(int peer, size_t flagIndex) const {
  RCN_CHECK(checkPeer(peer));
  RCN_ARG_CHECK(flagIndex < layout_.flagCount, "%s wire: flag index %zu out of range", name(), flagIndex);
  return rcnSuccess;
}

rcnResult_t Wire::putWithFlag(int peer, size_t localOffset, size_t remoteOffset, size_t bytes, size_t flagIndex,
                              uint32_t value) {
  if (bytes) RCN_CHECK(put(peer, localOffset, remoteOffset, bytes));
  return putFlag(peer, flagIndex, value);
}

rcnResult_t WireFailure::get(std::string* why) const {
  if (!failed()) return rcnSuccess;
  std::lock_guard<std::mutex> lock(mutex_);
  if (why) *why = text_;
  return rcnRemoteError;
}

rcnResult_t agreeOnStep(Bootstrap* bs, int rank, int nranks, bool ok, const std::string& localWhy,
                        const char* wire, const char* step, std::string* why) {
  if (!ok) *why = localWhy;  // kept should the exchange itself fail
  std::vector<int32_t> oks(nranks);
  oks[rank] = ok ? 1 : 0;
  RCN_CHECK(bs->allGather(oks.data(), sizeof(int32_t)));
  for (int r = 0; r < nranks; ++r) {
    if (oks[r]) continue;
    if (ok) *why = std::string(wire) + " wire: rank " + std::to_string(r) + " failed to " + step;
    return rcnSystemError;
  }
  return rcnSuccess;
}

bool parseWireKind(const std::string& text, WireKind* out) {
  if (text == "auto") *out = WireKind::Auto;
  else if (text == "shm") *out = WireKind::Shm;
  else if (text == "tcp") *out = WireKind::Tcp;
  else if (text == "verbs") *out = WireKind::Verbs;
  else if (text == "cuda") *out = WireKind::Cuda;
  else return false;
  return true;
}

rcnResult_t wireKindFromParams(WireKind* out) {
  std::string text;
  RCN_CHECK(paramChoice(ParamId::Wire, &text));
  RCN_ARG_CHECK(parseWireKind(text, out), "ROCENANTE_WIRE='%s' has no wire", text.c_str());
  return rcnSuccess;
}

namespace {

// Auto: shm when every rank shares this host, else verbs when every rank has
// an RDMA device, else tcp.
WireKind chooseWire(const std::vector<PeerIdentity>& ids) {
  bool oneHost = true, allRdma = true;
  for (const PeerIdentity& id : ids) {
    oneHost = oneHost && id.hostHash == ids[0].hostHash;
    allRdma = allRdma && id.hasRdmaDevice;
  }
  if (oneHost) return WireKind::Shm;
  if (allRdma) return WireKind::Verbs;
  return WireKind::Tcp;
}

}  // namespace

rcnResult_t resolveWireKind(const FastPathContext& ctx, WireKind kind, WireKind* out) {
  *out = kind;
  if (kind != WireKind::Auto) return rcnSuccess;
  RCN_ARG_CHECK(ctx.bootstrap != nullptr, "resolveWireKind: no bootstrap");
  std::vector<PeerIdentity> ids(ctx.nranks);
  ids[ctx.rank] = localPeerIdentity();
  RCN_CHECK(ctx.bootstrap->allGather(ids.data(), sizeof(PeerIdentity)));
  *out = chooseWire(ids);
  return rcnSuccess;
}

rcnResult_t createWire(const FastPathContext& ctx, WireKind kind, const WireLayout& layout,
                       std::unique_ptr<Wire>* out, std::string* why, const DeviceRegion* device) {
  RCN_ARG_CHECK(ctx.bootstrap != nullptr, "createWire: no bootstrap");
  RCN_ARG_CHECK(layout.regionBytes > 0 && layout.flagOffset % sizeof(uint32_t) == 0 &&
                    layout.flagOffset <= layout.regionBytes &&
                    layout.flagCount <= (layout.regionBytes - layout.flagOffset) / sizeof(uint32_t),
                "createWire: flags (%zu at %zu) do not fit the %zu-byte region", layout.flagCount,
                layout.flagOffset, layout.regionBytes);
  out->reset();
  RCN_CHECK(resolveWireKind(ctx, kind, &kind));
  RCN_ARG_CHECK(device == nullptr || kind == WireKind::Verbs || kind == WireKind::Cuda,
                "createWire: only the verbs and cuda wires take a device-memory region");
  if (kind == WireKind::Cuda && device == nullptr) {
    *why = "cuda wire: needs its region in device memory (the proxy path on a GPU)";
    return rcnSuccess;
  }
  switch (kind) {
    case WireKind::Shm: return createShmWire(ctx, layout, out, why);
    case WireKind::Tcp: return createTcpWire(ctx, layout, out, why);
    case WireKind::Verbs: return createVerbsWire(ctx, layout, device, out, why);
    case WireKind::Cuda: return createCudaWire(ctx, layout, *device, out, why);
    default: break;
  }
  *why = "unknown wire kind";
  return rcnInvalidArgument;
}

}  // namespace rcn
