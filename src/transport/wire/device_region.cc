// SPDX-License-Identifier: BSD-3-Clause
#include "transport/wire/device_region.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include "core/check.h"
#include "core/device_memory.h"
#include "transport/p2p/cumem_api.h"

namespace rcn {

namespace {

constexpr size_t kPageBytes = size_t(2) << 20;

rcnResult_t exportDmabuf(void* ptr, size_t bytes, int* fd, std::string* why) {
  const CuMemApi* api = cuMemApi(why);
  if (!api) return rcnInvalidUsage;
  CUresult res = api->getHandleForAddressRange(fd, reinterpret_cast<CUdeviceptr>(ptr), bytes,
                                               CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (res != CUDA_SUCCESS) {
    *why = "cuMemGetHandleForAddressRange (dma-buf of the GPU-memory region) failed: " + cuResultText(res);
    *fd = -1;
    return rcnUnhandledCudaError;
  }
  return rcnSuccess;
}

}  // namespace

rcnResult_t DeviceRegionMemory::allocate(int cudaDev, size_t bytes, bool dmabuf, std::string* why) {
  release();
  const size_t rounded = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  RCN_CUDA_CHECK(cudaSetDevice(cudaDev));
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, rounded);
  if (err != cudaSuccess) {
    *why = std::string("cudaMalloc of the ") + std::to_string(rounded) + "-byte GPU-memory region failed: " +
           cudaGetErrorString(err);
    return rcnUnhandledCudaError;
  }
  region_.ptr = static_cast<uint8_t*>(ptr);
  region_.cudaDev = cudaDev;
  RCN_CHECK(zeroDeviceMemory(ptr, rounded));
  if (dmabuf) RCN_CHECK(exportDmabuf(ptr, rounded, &region_.dmabufFd, why));
  return rcnSuccess;
}

void DeviceRegionMemory::release() {
  if (region_.ptr && cudaSetDevice(region_.cudaDev) == cudaSuccess) cudaFree(region_.ptr);
  abandon();
}

void DeviceRegionMemory::abandon() {
  if (region_.dmabufFd >= 0) close(region_.dmabufFd);
  region_ = DeviceRegion{};
}

}  // namespace rcn
