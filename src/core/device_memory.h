// SPDX-License-Identifier: BSD-3-Clause
// Device memory work at communicator creation that waits for nothing but
// itself.
//
// Communicators are often created while the application's kernels run (a
// second process group, a communicator built lazily, another thread
// capturing a CUDA graph). cudaMemset runs on the legacy stream, which waits
// for every blocking stream; cudaDeviceSynchronize and cudaFree wait for
// every kernel on the device, including an NCCL kernel whose peer is itself
// waiting for this creation to finish; and all three break another thread's
// graph capture. So creation zeroes memory on a private stream and waits for
// that stream alone, bounded; its scratch buffers are stream-ordered
// (cudaMallocFromPoolAsync / cudaFreeAsync) where the device has memory
// pools; and it runs in the relaxed capture mode, as NCCL's own
// initialisation does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "rocenante/rocenante.h"

namespace rcn {

// Zeroes `bytes` of device memory at ptr (on the current device) on a
// private stream, waiting for it at most ROCENANTE_BOOTSTRAP_TIMEOUT_MS
// (rcnSystemError past that: the GPU is full of work that does not end).
rcnResult_t zeroDeviceMemory(void* ptr, size_t bytes);
// The same for a copy of `bytes` from host memory at src to device memory at dst.
rcnResult_t copyToDeviceMemory(void* dst, const void* src, size_t bytes);

// Scratch memory ordered on `stream`, from a pool of the current device that
// every peer GPU can reach (NCCL may write straight into a buffer of a rank
// in the same process); cudaMalloc where the device has no memory pools
// (whose cudaFree then waits for the device). Free it with freeScratch on
// the same device.
rcnResult_t allocScratch(void** ptr, size_t bytes, cudaStream_t stream);
void freeScratch(void* ptr, cudaStream_t stream);

// For its lifetime, CUDA calls on this thread may do what a graph capture on
// another thread forbids (cudaMalloc, event and stream creation) without
// invalidating that capture; the previous mode comes back at the end.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope();
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  cudaStreamCaptureMode saved_ = cudaStreamCaptureModeRelaxed;
  bool changed_ = false;
};

}  // namespace rcn
