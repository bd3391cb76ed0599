// SPDX-License-Identifier: BSD-3-Clause
// The argument checks every GPU fast path makes on a call before launching,
// and the text both give when ranks made different calls.
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/dtype.h"
#include "transport/transport.h"

namespace rcn {

rcnResult_t checkGpuCall(const char* path, size_t bytes, size_t maxBytes, const void* send, const void* recv,
                         rcnDataType_t dtype) {
  const size_t size = dtypeSize(dtype);
  RCN_ARG_CHECK(bytes <= maxBytes, "%s of %zu bytes exceeds the slot size %zu", path, bytes, maxBytes);
  RCN_ARG_CHECK(reinterpret_cast<uintptr_t>(send) % size == 0 && reinterpret_cast<uintptr_t>(recv) % size == 0,
                "sendbuff %p / recvbuff %p are not aligned to the %zu-byte %s element", send, recv, size,
                dtypeName(dtype));
  return rcnSuccess;
}

std::string callMismatchText(int rank, uint32_t peer, uint32_t call) {
  return "rank " + std::to_string(rank) + ": peer " + std::to_string(peer) +
         " made a different call (collective, count, type or op) in call " + std::to_string(call) +
         "; every rank must make the same calls in the same order";
}

}  // namespace rcn
