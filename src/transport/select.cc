// SPDX-License-Identifier: BSD-3-Clause
#include <cstring>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "transport/transport.h"

namespace rcn {
namespace {

rcnResult_t buildKind(const FastPathContext& ctx, TransportKind kind,
                      std::unique_ptr<FastPath>* out, std::string* why) {
  switch (kind) {
    case TransportKind::Host:
      return createHostPath(ctx, out, why);
    case TransportKind::Proxy:
      return createProxyPath(ctx, out, why);
    case TransportKind::P2p:
    case TransportKind::Auto:
      return createP2pPath(ctx, out, why);
  }
  return rcnInternalError;
}

// Every rank keeps its fast path only if every rank built one, so routing
// stays identical everywhere.
rcnResult_t agree(const FastPathContext& ctx, std::unique_ptr<FastPath>* out, std::string* why) {
  std::vector<uint8_t> built(ctx.nranks, 0);
  built[ctx.rank] = *out ? 1 : 0;
  RCN_CHECK(ctx.bootstrap->allGather(built.data(), 1));
  for (int r = 0; r < ctx.nranks; ++r) {
    if (built[r]) continue;
    if (*out) *why = "rank " + std::to_string(r) + " could not build the fast path";
    out->reset();
    return rcnSuccess;
  }
  return rcnSuccess;
}

}  // namespace

rcnResult_t createFastPath(const FastPathContext& ctx, TransportKind kind,
                           std::unique_ptr<FastPath>* out, std::string* why) {
  out->reset();
  if (ctx.cudaDev < 0) kind = TransportKind::Host;
  clearLastError();  // so that a failure's reason below is the builder's, not an earlier warning
  rcnResult_t result = buildKind(ctx, kind, out, why);
  if (result != rcnSuccess) {
    // The ranks must still meet in agree(); the error becomes "no fast path",
    // with the builder's own reason (its text, or the warning it logged).
    std::string cause = !why->empty() ? *why : lastErrorText();
    if (cause.empty()) cause = rcnGetErrorString(result);
    *why = "building the fast path failed: " + cause;
    out->reset();
  }
  RCN_CHECK(agree(ctx, out, why));
  return rcnSuccess;
}

}  // namespace rcn
