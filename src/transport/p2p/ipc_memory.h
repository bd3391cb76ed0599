// SPDX-License-Identifier: BSD-3-Clause
// Device memory that other processes (or other GPUs of this process) map:
// the exchange region of one rank, and a peer's region mapped here.
// Three ways, chosen once per communicator:
//  - CuMem: cuMemCreate with a POSIX file descriptor handle (works for VMM
//    allocations; the descriptor travels over a Unix socket);
//  - Legacy: cudaMalloc + cudaIpcGetMemHandle (the handle travels in the blob);
//  - Local: every rank lives in this process: cudaMalloc + peer access.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "rocenante/rocenante.h"

namespace rcn {

enum class IpcKind { Local, CuMem, Legacy };
const char* ipcKindName(IpcKind kind);

class DeviceMapping {
 public:
  DeviceMapping() = default;
  DeviceMapping(const DeviceMapping&) = delete;
  DeviceMapping& operator=(const DeviceMapping&) = delete;
  DeviceMapping(DeviceMapping&& other) noexcept { *this = std::move(other); }
  DeviceMapping& operator=(DeviceMapping&& other) noexcept;
  ~DeviceMapping() { release(); }

  // This rank's region on the current device, zero-filled; bytes is rounded up.
  rcnResult_t allocate(IpcKind kind, int cudaDev, size_t bytes);
  // Exports an allocate()d CuMem region; the caller closes the descriptor.
  rcnResult_t exportFd(int* fd) const;
  rcnResult_t exportLegacy(cudaIpcMemHandle_t* handle) const;

  // Maps a peer's region into this process for the current device.
  rcnResult_t importFd(int fd, size_t bytes, int cudaDev);
  rcnResult_t importLegacy(const cudaIpcMemHandle_t& handle);
  // A region of this process (another rank's): no mapping to undo.
  void borrow(void* ptr, size_t bytes);

  void release();
  char* ptr() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  enum class How { None, CudaMalloc, CuMemOwned, CuMemImported, LegacyImported, Borrowed };
  rcnResult_t mapHandle(int cudaDev);

  How how_ = How::None;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
};

// Lets the current device read and write `peerDev`'s memory (cudaMalloc'd).
rcnResult_t enablePeerAccess(int peerDev);

}  // namespace rcn
