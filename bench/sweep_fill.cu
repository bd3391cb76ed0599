#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sweep_fill.h"
#include "sweep_pattern.h"

namespace rcn::bench {
namespace {

template <typename T>
__device__ T fromFloat(float v);
template <>
__device__ float fromFloat<float>(float v) { return v; }
template <>
__device__ __half fromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// blockIdx.y picks the slot; the x dimension strides over its elements.
template <typename T>
__global__ void fillKernel(char* base, size_t strideBytes, size_t count, uint64_t seed, int rank) {
  T* slot = reinterpret_cast<T*>(base + blockIdx.y * strideBytes);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    slot[i] = fromFloat<T>(patternValue(seed, rank, i));
}

template <typename T>
cudaError_t launchFill(void* base, size_t slots, size_t strideBytes, size_t count, uint64_t seed, int rank,
                       cudaStream_t stream) {
  const unsigned threads = 256;
  size_t blocksNeeded = (count + threads - 1) / threads;
  unsigned blocksX = static_cast<unsigned>(blocksNeeded < 1024 ? blocksNeeded : 1024);
  // gridDim.y is limited to 65535; the sweep uses at most a few hundred slots.
  if (slots == 0 || slots > 65535) return cudaErrorInvalidValue;
  dim3 grid(blocksX, static_cast<unsigned>(slots));
  fillKernel<T><<<grid, threads, 0, stream>>>(static_cast<char*>(base), strideBytes, count, seed, rank);
  return cudaGetLastError();
}

}  // namespace

cudaError_t fillPatternDevice(void* base, size_t slots, size_t strideBytes, size_t count,
                              rcnDataType_t dtype, uint64_t seed, int rank, cudaStream_t stream) {
  switch (dtype) {
    case rcnFloat32: return launchFill<float>(base, slots, strideBytes, count, seed, rank, stream);
    case rcnFloat16: return launchFill<__half>(base, slots, strideBytes, count, seed, rank, stream);
    case rcnBfloat16: return launchFill<__nv_bfloat16>(base, slots, strideBytes, count, seed, rank, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace rcn::bench
