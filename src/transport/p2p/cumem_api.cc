// SPDX-License-Identifier: BSD-3-Clause
#include "transport/p2p/cumem_api.h"

#include <cuda_runtime_api.h>

#include <mutex>

#include "core/log.h"

namespace rcn {

namespace {

// Fetches one entry point as of CUDA 12.0's ABI; false if the driver lacks it.
template <typename Fn>
bool fetch(const char* name, Fn* out, std::string* why) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == nullptr) {
    if (err != cudaSuccess) cudaGetLastError();
    *why = std::string("the CUDA driver has no ") + name;
    return false;
  }
  *out = reinterpret_cast<Fn>(fn);
  return true;
}

bool loadAll(CuMemApi* api, std::string* why) {
  return fetch("cuDeviceGet", &api->deviceGet, why) &&
         fetch("cuDeviceGetAttribute", &api->deviceGetAttribute, why) &&
         fetch("cuMemGetAllocationGranularity", &api->getGranularity, why) &&
         fetch("cuMemCreate", &api->create, why) && fetch("cuMemRelease", &api->release, why) &&
         fetch("cuMemAddressReserve", &api->addressReserve, why) &&
         fetch("cuMemAddressFree", &api->addressFree, why) && fetch("cuMemMap", &api->map, why) &&
         fetch("cuMemUnmap", &api->unmap, why) && fetch("cuMemSetAccess", &api->setAccess, why) &&
         fetch("cuMemExportToShareableHandle", &api->exportHandle, why) &&
         fetch("cuMemImportFromShareableHandle", &api->importHandle, why) &&
         fetch("cuGetErrorString", &api->errorString, why) &&
         fetch("cuMemGetHandleForAddressRange", &api->getHandleForAddressRange, why) &&
         fetch("cuStreamWriteValue32", &api->streamWriteValue32, why);
}

}  // namespace

const CuMemApi* cuMemApi(std::string* why) {
  static std::once_flag once;
  static CuMemApi api{};
  static bool ok = false;
  static std::string failure;
  std::call_once(once, [] { ok = loadAll(&api, &failure); });
  if (!ok) *why = failure;
  return ok ? &api : nullptr;
}

bool cuMemFdSupported(int cudaDev, std::string* why) {
  const CuMemApi* api = cuMemApi(why);
  if (!api) return false;
  CUdevice dev = 0;
  int vmm = 0, fd = 0;
  if (api->deviceGet(&dev, cudaDev) != CUDA_SUCCESS ||
      api->deviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
          CUDA_SUCCESS ||
      api->deviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                              dev) != CUDA_SUCCESS) {
    *why = "could not query cuMem support of CUDA device " + std::to_string(cudaDev);
    return false;
  }
  if (!vmm || !fd) {
    *why = "CUDA device " + std::to_string(cudaDev) +
           (vmm ? " cannot export cuMem memory as file descriptors" : " has no virtual memory management");
    return false;
  }
  return true;
}

std::string cuResultText(CUresult result) {
  std::string unused;
  const CuMemApi* api = cuMemApi(&unused);
  const char* text = nullptr;
  if (api && api->errorString(result, &text) == CUDA_SUCCESS && text) return text;
  return "CUresult " + std::to_string(static_cast<int>(result));
}

}  // namespace rcn
