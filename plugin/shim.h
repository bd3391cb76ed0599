// SPDX-License-Identifier: BSD-3-Clause
// The NCCL shim's own exported entry point (the rest of the shim is the NCCL
// API itself, see forwarders.cc and shim.cc).
#pragma once

#include <nccl.h>

#include "rocenante/rocenante.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What rocenante decided for an NCCL communicator created through the shim:
 * the same fields rcnCommQuery reports. A communicator rocenante did not
 * build state for (disabled, non-blocking, one rank) reports path
 * rcnPathNccl and says why in reason. rcnInvalidArgument for an unknown
 * handle. Tests and tools reach it with dlsym/ctypes. */
__attribute__((visibility("default"))) rcnResult_t rcnShimCommQuery(ncclComm_t comm,
                                                                     rcnCommInfo* info);

#ifdef __cplusplus
}
#endif
