// Waiting for a device to finish its work, without waiting forever.
//
// Abort (and a creation that failed) may free a communicator's exchange
// regions only once no kernel of ours can still touch them. Our kernels run
// on the user's streams and in the user's graphs, so the only way to know is
// to wait for the whole device. That also waits for kernels that are not
// ours: an NCCL collective whose peer died never finishes until its own
// communicator is aborted, which the caller may do only after we return
// (PyTorch aborts its communicators one after another). So the wait runs on
// a thread of its own and gives up after a bound; the caller then leaks what
// it cannot free safely (cudaFree would wait for the device too).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace rcn {

// True when every kernel on cudaDev has finished within limitMs, or the
// device is in an error state where none runs (*syncError, unless null, then
// holds the device's error; cudaSuccess otherwise). On false, *whyNot (unless
// null) says why: the bound passed (a detached thread goes on waiting and
// exits once the device drains), or a CUDA graph capture is under way on the
// device, during which CUDA permits no device-wide wait (the attempt also
// invalidates that capture: a teardown during another thread's capture costs
// that capture).
bool drainDevice(int cudaDev, int64_t limitMs, cudaError_t* syncError = nullptr, std::string* whyNot = nullptr);

}  // namespace rcn
