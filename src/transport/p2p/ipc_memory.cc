// SPDX-License-Identifier: BSD-3-Clause
#include "transport/p2p/ipc_memory.h"

#include <cstdint>
#include <utility>

#include "core/check.h"
#include "core/device_memory.h"
#include "transport/p2p/cumem_api.h"

namespace rcn {

namespace {

CUmemAllocationProp fdProp(int cudaDev) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = cudaDev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

const CuMemApi* api() {
  std::string unused;
  return cuMemApi(&unused);
}

}  // namespace

const char* ipcKindName(IpcKind kind) {
  switch (kind) {
    case IpcKind::Local: return "p2p-local";
    case IpcKind::CuMem: return "p2p-ipc";
    case IpcKind::Legacy: return "p2p-ipc-legacy";
  }
  return "p2p";
}

DeviceMapping& DeviceMapping::operator=(DeviceMapping&& other) noexcept {
  if (this != &other) {
    release();
    how_ = std::exchange(other.how_, How::None);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

rcnResult_t DeviceMapping::allocate(IpcKind kind, int cudaDev, size_t bytes) {
  if (kind != IpcKind::CuMem) {
    RCN_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    how_ = How::CudaMalloc;
    bytes_ = bytes;
  } else {
    const CuMemApi* cu = api();
    RCN_ARG_CHECK(cu != nullptr, "cuMem entry points are missing");
    CUmemAllocationProp prop = fdProp(cudaDev);
    size_t granularity = 0;
    RCN_CU_CHECK(cu, getGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    bytes_ = (bytes + granularity - 1) / granularity * granularity;
    RCN_CU_CHECK(cu, create(&handle_, bytes_, &prop, 0));
    how_ = How::CuMemOwned;
    RCN_CHECK(mapHandle(cudaDev));
  }
  RCN_CHECK(zeroDeviceMemory(ptr_, bytes_));
  return rcnSuccess;
}

// Reserves an address range, maps handle_ there and opens it to cudaDev.
rcnResult_t DeviceMapping::mapHandle(int cudaDev) {
  const CuMemApi* cu = api();
  CUdeviceptr va = 0;
  RCN_CU_CHECK(cu, addressReserve(&va, bytes_, 0, 0, 0));
  ptr_ = reinterpret_cast<void*>(va);
  CUresult mapped = cu->map(va, bytes_, 0, handle_, 0);
  if (mapped != CUDA_SUCCESS) {
    cu->addressFree(va, bytes_);
    ptr_ = nullptr;
    RCN_WARN(RCN_LOG_TRANSPORT, "cuMemMap failed: %s", cuResultText(mapped).c_str());
    return rcnUnhandledCudaError;
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = cudaDev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  RCN_CU_CHECK(cu, setAccess(va, bytes_, &access, 1));
  return rcnSuccess;
}

rcnResult_t DeviceMapping::exportFd(int* fd) const {
  RCN_ARG_CHECK(how_ == How::CuMemOwned, "only a cuMem region can be exported as a descriptor");
  RCN_CU_CHECK(api(), exportHandle(fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  return rcnSuccess;
}

rcnResult_t DeviceMapping::exportLegacy(cudaIpcMemHandle_t* handle) const {
  RCN_ARG_CHECK(how_ == How::CudaMalloc, "only a cudaMalloc region has a legacy IPC handle");
  RCN_CUDA_CHECK(cudaIpcGetMemHandle(handle, ptr_));
  return rcnSuccess;
}

rcnResult_t DeviceMapping::importFd(int fd, size_t bytes, int cudaDev) {
  const CuMemApi* cu = api();
  RCN_ARG_CHECK(cu != nullptr, "cuMem entry points are missing");
  RCN_CU_CHECK(cu, importHandle(&handle_, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  how_ = How::CuMemImported;
  bytes_ = bytes;
  return mapHandle(cudaDev);
}

rcnResult_t DeviceMapping::importLegacy(const cudaIpcMemHandle_t& handle) {
  RCN_CUDA_CHECK(cudaIpcOpenMemHandle(&ptr_, handle, cudaIpcMemLazyEnablePeerAccess));
  how_ = How::LegacyImported;
  return rcnSuccess;
}

void DeviceMapping::borrow(void* ptr, size_t bytes) {
  release();
  how_ = How::Borrowed;
  ptr_ = ptr;
  bytes_ = bytes;
}

// Best effort: errors while tearing down are logged, not returned.
void DeviceMapping::release() {
  const CuMemApi* cu = (how_ == How::CuMemOwned || how_ == How::CuMemImported) ? api() : nullptr;
  switch (how_) {
    case How::CudaMalloc:
      if (cudaFree(ptr_) != cudaSuccess) RCN_WARN(RCN_LOG_TRANSPORT, "cudaFree of an exchange region failed");
      break;
    case How::LegacyImported:
      if (cudaIpcCloseMemHandle(ptr_) != cudaSuccess) RCN_WARN(RCN_LOG_TRANSPORT, "cudaIpcCloseMemHandle failed");
      break;
    case How::CuMemOwned:
    case How::CuMemImported:
      if (ptr_) {
        cu->unmap(reinterpret_cast<CUdeviceptr>(ptr_), bytes_);
        cu->addressFree(reinterpret_cast<CUdeviceptr>(ptr_), bytes_);
      }
      if (handle_) cu->release(handle_);
      break;
    case How::Borrowed:
    case How::None:
      break;
  }
  cudaGetLastError();  // teardown errors must not leak into the user's next call
  how_ = How::None;
  ptr_ = nullptr;
  bytes_ = 0;
  handle_ = 0;
}

rcnResult_t enablePeerAccess(int peerDev) {
  cudaError_t err = cudaDeviceEnablePeerAccess(peerDev, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return rcnSuccess;
  }
  RCN_CUDA_CHECK(err);
  return rcnSuccess;
}

}  // namespace rcn
