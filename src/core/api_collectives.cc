// SPDX-License-Identifier: BSD-3-Clause
// The public all-gather and reduce-scatter: argument checks, then the
// communicator's routing (comm_collectives.cc).
#include <cstdint>

#include "core/check.h"
#include "core/comm.h"
#include "core/dtype.h"
#include "core/log.h"
#include "rocenante/rocenante.h"

namespace {

// Whether [a, a + aBytes) and [b, b + bBytes) share a byte (no sums that could wrap).
bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x <= y ? y - x < aBytes : x - y < bBytes;
}

// The checks both calls share: comm, type, pointers, and a whole buffer
// (nranks shares of count elements) whose byte size fits size_t.
rcnResult_t checkShares(const char* caller, rcnComm_t comm, const void* send, const void* recv, size_t count,
                        rcnDataType_t datatype, size_t* shareBytes) {
  RCN_CHECK(rcn::commCheck(comm, caller));
  RCN_ARG_CHECK(rcn::dtypeIsValid(datatype), "%s: datatype %d is not a valid type", caller, static_cast<int>(datatype));
  *shareBytes = 0;
  if (count == 0) return rcnSuccess;
  RCN_ARG_CHECK(send != nullptr, "%s: sendbuff is NULL with count=%zu", caller, count);
  RCN_ARG_CHECK(recv != nullptr, "%s: recvbuff is NULL with count=%zu", caller, count);
  RCN_ARG_CHECK(count <= SIZE_MAX / rcn::dtypeSize(datatype) / static_cast<size_t>(comm->nranks),
                "%s: count=%zu of %s on %d ranks overflows a byte count", caller, count, rcn::dtypeName(datatype),
                comm->nranks);
  *shareBytes = count * rcn::dtypeSize(datatype);
  return rcnSuccess;
}

}  // namespace

#pragma GCC visibility push(default)

extern "C" {

rcnResult_t rcnAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, rcnDataType_t datatype, rcnComm_t comm,
                         rcnStream_t stream) {
  rcn::clearLastError();
  size_t share = 0;
  RCN_CHECK(checkShares("rcnAllGather", comm, sendbuff, recvbuff, sendcount, datatype, &share));
  if (sendcount == 0) return rcnSuccess;
  const size_t whole = share * static_cast<size_t>(comm->nranks);
  const bool inPlace = sendbuff == static_cast<const char*>(recvbuff) + share * static_cast<size_t>(comm->rank);
  RCN_ARG_CHECK(inPlace || !overlaps(sendbuff, share, recvbuff, whole),
                "rcnAllGather: sendbuff %p (%zu bytes) overlaps recvbuff %p (%zu bytes) other than in place "
                "(sendbuff == recvbuff + rank * sendcount)",
                sendbuff, share, recvbuff, whole);
  return rcn::commAllGather(comm, sendbuff, recvbuff, sendcount, datatype, reinterpret_cast<cudaStream_t>(stream));
}

rcnResult_t rcnReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, rcnDataType_t datatype,
                             rcnRedOp_t op, rcnComm_t comm, rcnStream_t stream) {
  rcn::clearLastError();
  size_t share = 0;
  RCN_CHECK(checkShares("rcnReduceScatter", comm, sendbuff, recvbuff, recvcount, datatype, &share));
  RCN_ARG_CHECK(rcn::opIsValid(op), "rcnReduceScatter: op %d is not a valid reduction op", static_cast<int>(op));
  if (recvcount == 0) return rcnSuccess;
  const size_t whole = share * static_cast<size_t>(comm->nranks);
  const bool inPlace = recvbuff == static_cast<const char*>(sendbuff) + share * static_cast<size_t>(comm->rank);
  RCN_ARG_CHECK(inPlace || !overlaps(sendbuff, whole, recvbuff, share),
                "rcnReduceScatter: recvbuff %p (%zu bytes) overlaps sendbuff %p (%zu bytes) other than in place "
                "(recvbuff == sendbuff + rank * recvcount)",
                recvbuff, share, sendbuff, whole);
  return rcn::commReduceScatter(comm, sendbuff, recvbuff, recvcount, datatype, op,
                                reinterpret_cast<cudaStream_t>(stream));
}

}  // extern "C"

#pragma GCC visibility pop
