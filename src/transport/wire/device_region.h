// SPDX-License-Identifier: BSD-3-Clause
// Device memory for an exchange region that a wire writes without the CPU:
// registered with the NIC (GPUDirect RDMA on the verbs wire) or written by
// the copy engine (the cuda wire). One cudaMalloc of whole 2 MiB pages, so
// that its dma-buf covers the region and the allocation's base is the
// region's (CUDA IPC hands out bases); zero-filled, so no flag or LL line
// starts out looking written.
#pragma once

#include <cstddef>
#include <string>

#include "rocenante/rocenante.h"
#include "transport/wire/wire.h"

namespace rcn {

class DeviceRegionMemory {
 public:
  DeviceRegionMemory() = default;
  DeviceRegionMemory(const DeviceRegionMemory&) = delete;
  DeviceRegionMemory& operator=(const DeviceRegionMemory&) = delete;
  ~DeviceRegionMemory() { release(); }

  // exportDmabuf: also open a dma-buf of it (region().dmabufFd).
  rcnResult_t allocate(int cudaDev, size_t bytes, bool exportDmabuf, std::string* why);
  void release();
  // Forgets the memory without freeing it, for a GPU that may still write it
  // (a free would wait for the GPU); the dma-buf is closed.
  void abandon();
  const DeviceRegion& region() const { return region_; }

 private:
  DeviceRegion region_;
};

}  // namespace rcn
