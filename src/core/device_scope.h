// SPDX-License-Identifier: BSD-3-Clause
// Makes a CUDA device current for a scope and puts the caller's device back
// afterwards, so library calls never leave the user's thread on another GPU.
#pragma once

#include <cuda_runtime_api.h>

namespace rcn {

class DeviceScope {
 public:
  // dev < 0: change nothing now, and restore the current device at the end
  // whatever the code inside the scope selects.
  explicit DeviceScope(int dev = -1) : changed_(dev < 0) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    if (dev >= 0 && dev != saved_) {
      ok_ = cudaSetDevice(dev) == cudaSuccess;
      changed_ = true;
    }
  }
  // Restores only what changed: this sits on the all-reduce launch path.
  ~DeviceScope() {
    if (changed_ && saved_ >= 0) cudaSetDevice(saved_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  // False when the device could not be made current.
  bool ok() const { return ok_; }

 private:
  bool changed_;
  int saved_ = -1;
  bool ok_ = true;
};

}  // namespace rcn
