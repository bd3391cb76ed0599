// The argument checks every GPU fast path makes on a call before launching.
#include <cstdint>

#include "core/check.h"
#include "core/dtype.h"
#include "transport/transport.h"

namespace rcn {

rcnResult_t checkGpuCall(const char* path, size_t bytes, size_t maxBytes, const void* send, const void* recv,
                         rcnDataType_t dtype) {
  const size_t size = dtypeSize(dtype);
  RCN_ARG_CHECK(bytes <= maxBytes, "%s all-reduce of %zu bytes exceeds the slot size %zu", path, bytes, maxBytes);
  RCN_ARG_CHECK(reinterpret_cast<uintptr_t>(send) % size == 0 && reinterpret_cast<uintptr_t>(recv) % size == 0,
                "sendbuff %p / recvbuff %p are not aligned to the %zu-byte %s element", send, recv, size,
                dtypeName(dtype));
  return rcnSuccess;
}

}  // namespace rcn
