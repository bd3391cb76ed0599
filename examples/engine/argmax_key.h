// The vocab-parallel argmax's key (gpu_model.cc): each rank turns the best
// logit of its vocabulary slice into one 64-bit key, and the maximum key over
// all ranks (one all-reduce) names the global argmax, the lowest index on
// ties. High word: the float's bits made monotonic (-0 counts as +0); low
// word: the complemented index. Host and device, so CI tests it on the CPU.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define ENGINE_HOST_DEVICE __host__ __device__
#else
#define ENGINE_HOST_DEVICE
#endif

namespace engine {

ENGINE_HOST_DEVICE inline uint64_t argmaxKey(float value, uint32_t index) {
  const float canonical = value == 0.0f ? 0.0f : value;
  uint32_t bits;
  memcpy(&bits, &canonical, sizeof bits);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (uint64_t(bits) << 32) | (0xffffffffu - index);
}

ENGINE_HOST_DEVICE inline int argmaxKeyIndex(uint64_t key) { return int(0xffffffffu - uint32_t(key & 0xffffffffu)); }

}  // namespace engine
