// SPDX-License-Identifier: BSD-3-Clause
// Building a communicator's fast path: which transports exist and how one is
// chosen. Each transport lives in its own folder and exposes one factory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/fast_path.h"

namespace rcn {

enum class TransportKind { Auto, P2p, Proxy, Host };

// Builds the fast path of the given kind (Auto: the best the ranks agree on).
// On rcnSuccess *out may still be null: no transport fits, and *why says so.
// Collective over ctx.bootstrap: every rank calls it with the same kind.
rcnResult_t createFastPath(const FastPathContext& ctx, TransportKind kind,
                           std::unique_ptr<FastPath>* out, std::string* why);

// Same host, every pair of GPUs with peer access (src/transport/p2p).
rcnResult_t createP2pPath(const FastPathContext& ctx, std::unique_ptr<FastPath>* out,
                          std::string* why);

// GPU kernel plus a host proxy thread moving bytes over a wire (src/transport/proxy).
rcnResult_t createProxyPath(const FastPathContext& ctx, std::unique_ptr<FastPath>* out,
                            std::string* why);

// No GPU: the protocol with buffers in host memory and the reduction on the CPU
// (src/transport/host).
rcnResult_t createHostPath(const FastPathContext& ctx, std::unique_ptr<FastPath>* out,
                           std::string* why);

// What a GPU fast path checks on each call: the message fits its slots
// (maxBytes) and both pointers are aligned to the element; a clear error
// naming the path otherwise.
rcnResult_t checkGpuCall(const char* path, size_t bytes, size_t maxBytes, const void* send, const void* recv,
                         rcnDataType_t dtype);

// The asyncError text of a GPU fast path whose kernel saw a peer's flag or
// line of another call (kOneShotMismatch): rank, peer and call number.
std::string callMismatchText(int rank, uint32_t peer, uint32_t call);

}  // namespace rcn
