// SPDX-License-Identifier: BSD-3-Clause
// The real NCCL, opened at run time. librocenante.so never links libnccl: it may
// itself be installed as libnccl.so.2 or preloaded in front of it, so the real
// library is found through ROCENANTE_NCCL_LIBRARY, else the first libnccl.so.2
// in the search order that is not rocenante.
#pragma once

#include <nccl.h>

#include "rocenante/rocenante.h"

namespace rcn {

// The entry points rocenante itself calls. The shim resolves the rest of the
// API from the same handle (ncclLibraryHandle).
struct NcclApi {
  ncclResult_t (*getVersion)(int*);
  ncclResult_t (*getUniqueId)(ncclUniqueId*);
  ncclResult_t (*commInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*commInitAll)(ncclComm_t*, int, const int*);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commAbort)(ncclComm_t);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
  const char* (*getErrorString)(ncclResult_t);
};

// Loads the real NCCL once per process. rcnSystemError with a logged reason
// (which paths were tried) when none is found.
rcnResult_t ncclApi(const NcclApi** api);

// The dlopen handle of the real library, loading it first if need be; null
// when none was found. It may lack entry points ncclApi() needs.
void* ncclLibraryHandle();

// Path of the real library that was opened, for logs and rcnCommQuery.
const char* ncclLibraryPath();

// Maps an NCCL result to ours (the values are the same by construction).
inline rcnResult_t fromNccl(ncclResult_t r) { return static_cast<rcnResult_t>(r); }

}  // namespace rcn

// Calls a real-NCCL entry point, logging file:line and NCCL's text on failure.
#define RCN_NCCL_CHECK(api, call)                                                        \
  do {                                                                                   \
    ncclResult_t rcn_nres_ = (api)->call;                                                \
    if (rcn_nres_ != ncclSuccess && rcn_nres_ != ncclInProgress) {                       \
      RCN_WARN(RCN_LOG_ALL, "%s:%d NCCL error %d '%s' from %s", __FILE__, __LINE__,      \
               static_cast<int>(rcn_nres_), (api)->getErrorString(rcn_nres_), #call);   \
      return ::rcn::fromNccl(rcn_nres_);                                                 \
    }                                                                                    \
  } while (0)
