// SPDX-License-Identifier: BSD-3-Clause
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

// What a wait for a device found.
enum class Drained {
  Yes,         // every kernel finished, or an error left the device running none
  TimedOut,    // kernels still ran at the bound (a detached thread waits on, exiting once they end)
  CannotTell,  // no wait was possible (a capture under way, no thread to wait on)
};

// Waits at most limitMs for every kernel on cudaDev. On Yes, *syncError
// (unless null) holds the device's error, cudaSuccess otherwise; else
// *whyNot (unless null) says why. A CUDA graph capture under way on the
// device permits no device-wide wait, and the attempt invalidates that
// capture: a teardown during another thread's capture costs that capture.
Drained drainDevice(int cudaDev, int64_t limitMs, cudaError_t* syncError = nullptr, std::string* whyNot = nullptr);

}  // namespace rcn
