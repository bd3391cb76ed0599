// SPDX-License-Identifier: BSD-3-Clause
// The CUDA driver's virtual memory (cuMem*) entry points, fetched at run time
// through the runtime (cudaGetDriverEntryPointByVersion), so that the library
// never links libcuda and still runs where the driver lacks them.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

#include "rocenante/rocenante.h"

namespace rcn {

struct CuMemApi {
  PFN_cuDeviceGet_v2000 deviceGet;
  PFN_cuDeviceGetAttribute_v2000 deviceGetAttribute;
  PFN_cuMemGetAllocationGranularity_v10020 getGranularity;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemAddressReserve_v10020 addressReserve;
  PFN_cuMemAddressFree_v10020 addressFree;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemUnmap_v10020 unmap;
  PFN_cuMemSetAccess_v10020 setAccess;
  PFN_cuMemExportToShareableHandle_v10020 exportHandle;
  PFN_cuMemImportFromShareableHandle_v10020 importHandle;
  PFN_cuGetErrorString_v6000 errorString;
  // For the proxy path's device-memory regions (GPUDirect RDMA, the cuda wire).
  PFN_cuMemGetHandleForAddressRange_v11070 getHandleForAddressRange;
  PFN_cuStreamWriteValue32_v11070 streamWriteValue32;
};

// The table, or null (with the reason in *why) when an entry point is missing.
const CuMemApi* cuMemApi(std::string* why);

// Whether `cudaDev` can export cuMem allocations as POSIX file descriptors.
bool cuMemFdSupported(int cudaDev, std::string* why);

// "CUDA_ERROR_..." text of a driver result, for messages.
std::string cuResultText(CUresult result);

}  // namespace rcn

// Logs file:line and the driver's error name; fails with rcnUnhandledCudaError.
#define RCN_CU_CHECK(api, call)                                                          \
  do {                                                                                   \
    CUresult rcn_cu_ = (api)->call;                                                      \
    if (rcn_cu_ != CUDA_SUCCESS) {                                                       \
      RCN_WARN(RCN_LOG_TRANSPORT, "%s:%d CUDA driver error %s from %s", __FILE__, __LINE__, \
               ::rcn::cuResultText(rcn_cu_).c_str(), #call);                             \
      return rcnUnhandledCudaError;                                                      \
    }                                                                                    \
  } while (0)
