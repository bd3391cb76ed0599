// SPDX-License-Identifier: BSD-3-Clause
// The argmax's key (gpu_kernels.cu, gpu_model.cc): a logit and its index as
// one 64-bit key whose maximum names the argmax, the lowest index on ties, so
// blocks (atomicMax) and ranks (one all-reduce of the vocab-parallel head)
// combine their best in any order. High word: the float's bits made
// monotonic (-0 counts as +0; a NaN with the sign bit clear ranks above
// +inf, so a model that produces NaN logits yields a token that shows it,
// not a silently plausible one); low word: the complemented index. Host and
// device, so CI tests it on the CPU.
#pragma once

#include <cstdint>
#include <cstring>

#include "host_device.h"

namespace engine {

ENGINE_HOST_DEVICE inline uint64_t argmaxKey(float value, uint32_t index) {
  const float canonical = value == 0.0f ? 0.0f : value;
  uint32_t bits;
  memcpy(&bits, &canonical, sizeof bits);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (uint64_t(bits) << 32) | (0xffffffffu - index);
}

ENGINE_HOST_DEVICE inline int argmaxKeyIndex(uint64_t key) { return int(0xffffffffu - uint32_t(key & 0xffffffffu)); }

// Whether the key's value is a finite float: +inf and a NaN with the sign
// bit clear rank at or above +inf's high word, -inf and a NaN with it set at
// or below -inf's. A winner that is not finite means the logits overflowed.
ENGINE_HOST_DEVICE inline bool argmaxKeyFinite(uint64_t key) {
  const uint32_t high = uint32_t(key >> 32);
  return high > 0x007fffffu && high < 0xff800000u;
}

}  // namespace engine
