// SPDX-License-Identifier: BSD-3-Clause
// What every engine kernel file shares: fp32/bf16 conversions, the wait on
// the previous kernel (programmatic dependent launch), block reductions in a
// fixed order, and the launch helper.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "gpu_kernels.h"
#include "rocenante/device.cuh"

namespace engine {
namespace {

__device__ inline float toFloat(float v) { return v; }
__device__ inline float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ inline T fromFloat(float v);
template <>
__device__ inline float fromFloat<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// 4 packed bf16 values (8 bytes) as floats.
__device__ inline float4 bf16x4ToFloat4(uint2 packed) {
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// 4 floats as 4 packed bf16 values (round to nearest even).
__device__ inline uint2 float4ToBf16x4(float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}

// RoPE's inverse frequency of rotation pair i: the model's table, or
// ropeTheta^(-2i/d). One expression for every kernel that rotates, so that
// their angles agree bit for bit.
__device__ inline float ropeInverseFrequency(const AttentionShape& s, int i) {
  return s.ropeFreqs ? s.ropeFreqs[i] : powf(s.ropeTheta, -2.0f * i / s.headDim);
}

// Programmatic dependent launch: let the next kernel on the stream be
// scheduled now (unless letNextIn is false), then wait until the previous
// kernel has finished and its writes are visible. Every kernel calls it
// before it reads or writes any activation (before it, kernels only load
// weights and what is as fixed as weights, the RoPE frequency table, and
// read hints for prefetches); both halves are no-ops for a plain launch. A
// kernel that waits for peers (the exchange product) passes false and lets
// the next kernel in when it exits: a next kernel let in earlier would hold
// SMs while it waits, and let in its own next one, where a peer sharing the
// GPU may need the room (rocenante/device.cuh).
__device__ inline void waitForPrevious(bool letNextIn = true) {
  if (letNextIn) rcn_device::rcnDeviceLetNextKernelIn();
  rcn_device::rcnDeviceWaitForPreviousKernels();
}

// Asks L2 to fetch [p, p + bytes) (p 16-byte aligned, bytes a multiple of
// 16). Kernels call it before waiting for the previous kernel, possibly on
// rows that kernel is still writing: L2 is where every write lands, so a
// prefetch cannot leave a stale copy behind; it only saves a later miss.
__device__ inline void prefetchL2(const void* p, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(bytes) : "memory");
#endif
}

// Sum and maximum over a warp, in a fixed butterfly order; every lane gets the result.
__device__ inline float warpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32). Every thread gets the total.
__device__ float blockSum(float v) {
  __shared__ float partials[32];
  __shared__ float total;
  v = warpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partials may still be read by a previous call
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const float w = warpSum(lane < int(blockDim.x / 32) ? partials[lane] : 0.0f);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

__device__ float blockMax(float v) {
  __shared__ float partials[32];
  __shared__ float total;
  v = warpMax(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const float w = warpMax(lane < int(blockDim.x / 32) ? partials[lane] : -INFINITY);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

constexpr size_t kDefaultDynamicShared = 48 * 1024;  // every kernel's limit on every device at first

// Raises kernel instance kKernel's dynamic shared memory limit to `smem` on
// the current device where its limit there (kDefaultDynamicShared at first)
// is lower. The limit is a per-device attribute; one record of it per device
// (a second record could set it lower than a launch already needs), under a
// lock since ranks may share a process. One instance serves launches of
// different sizes, and a captured graph keeps its launches: the limit only
// ever goes up, and is set once per size rather than at every launch.
template <auto kKernel>
cudaError_t allowKernelShared(size_t smem) {
  if (smem <= kDefaultDynamicShared) return cudaSuccess;  // nothing to raise (most decode launches)
  static std::mutex mutex;
  static std::map<int, size_t> allowedOn;  // device -> limit set
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mutex);
  size_t& allowed = allowedOn.try_emplace(device, kDefaultDynamicShared).first->second;
  if (smem <= allowed) return cudaSuccess;
  e = cudaFuncSetAttribute(reinterpret_cast<const void*>(kKernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(smem));
  if (e == cudaSuccess) allowed = smem;
  return e;
}

// kernel<<<grid, block, smem, on.stream>>>(args...), as a programmatic
// dependent launch when on.overlap is set, its blocks grouped in thread
// block clusters of clusterX along x when clusterX > 1.
template <typename... Params, typename... Args>
cudaError_t launchInClusters(int clusterX, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Launch on,
                             Args... args) {
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  if (on.overlap) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (clusterX > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = clusterX;
    attributes[count].val.clusterDim.y = 1;
    attributes[count++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = on.stream;
  config.attrs = count ? attributes : nullptr;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Launch on, Args... args) {
  return launchInClusters(1, kernel, grid, block, smem, on, args...);
}

}  // namespace
}  // namespace engine

// KERNEL<T> launched (launch() above) with T = float or __nv_bfloat16 as the
// DType t says; the arguments may name T.
#define ENGINE_DISPATCH(t, KERNEL, GRID, BLOCK, SMEM, ON, ...)                  \
  ((t) == DType::F32 ? [&] { using T = float; return launch(KERNEL<T>, GRID, BLOCK, SMEM, ON, __VA_ARGS__); }() \
                     : [&] { using T = __nv_bfloat16; return launch(KERNEL<T>, GRID, BLOCK, SMEM, ON, __VA_ARGS__); }())

