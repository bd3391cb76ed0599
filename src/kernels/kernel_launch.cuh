// SPDX-License-Identifier: BSD-3-Clause
// Host side shared by the all-reduce kernels (kernels/one_shot.cu and
// transport/proxy/proxy_kernel.cu): the (dtype, op) instance table, its
// preload, and the launch with or without programmatic dependent launch (PDL).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/check.h"
#include "kernels/one_shot.h"
#include "kernels/reduce_ops.cuh"

// The instances of kernel template K<T, Op> as an initializer for
// KernelFn table[rcnNumTypes][rcnNumOps]: rows in rcnDataType_t order,
// columns in rcnRedOp_t order.
#define RCN_KERNEL_OPS_ROW(K, T) \
  { K<T, OpSum>, K<T, OpProd>, K<T, OpMax>, K<T, OpMin>, K<T, OpAvg> }
#define RCN_KERNEL_TABLE(K)                                                                  \
  {                                                                                          \
    RCN_KERNEL_OPS_ROW(K, int8_t), RCN_KERNEL_OPS_ROW(K, uint8_t),                           \
        RCN_KERNEL_OPS_ROW(K, int32_t), RCN_KERNEL_OPS_ROW(K, uint32_t),                     \
        RCN_KERNEL_OPS_ROW(K, int64_t), RCN_KERNEL_OPS_ROW(K, uint64_t),                     \
        RCN_KERNEL_OPS_ROW(K, __half), RCN_KERNEL_OPS_ROW(K, float),                         \
        RCN_KERNEL_OPS_ROW(K, double), RCN_KERNEL_OPS_ROW(K, __nv_bfloat16),                 \
        RCN_KERNEL_OPS_ROW(K, __nv_fp8_e4m3), RCN_KERNEL_OPS_ROW(K, __nv_fp8_e5m2)           \
  }

namespace rcn {

// Enqueues kernel<<<grid.blocks, grid.threads, 0, stream>>>(args...). With
// programmaticLaunch it may be scheduled while the previous kernel on the
// stream runs, once that one lets it in (rcnDeviceLetNextKernelIn); it still
// waits for that kernel (rcnDeviceWaitForPreviousKernels) before touching
// memory.
template <typename... Params, typename... Args>
rcnResult_t launchKernel(void (*kernel)(Params...), const OneShotGrid& grid, bool programmaticLaunch,
                         cudaStream_t stream, Args&&... args) {
  if (!programmaticLaunch) {
    kernel<<<grid.blocks, grid.threads, 0, stream>>>(std::forward<Args>(args)...);
    RCN_CUDA_CHECK(cudaGetLastError());
    return rcnSuccess;
  }
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid.blocks);
  config.blockDim = dim3(grid.threads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  RCN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  return rcnSuccess;
}

// Loads every instance of a table on the current device now. CUDA loads a
// kernel lazily, at its first launch, and such a load waits for the kernels
// running on the GPU: where ranks share a GPU, a peer's kernel, which waits
// for this one until the timeout.
template <typename KernelFn>
rcnResult_t preloadKernels(const KernelFn (&table)[rcnNumTypes][rcnNumOps]) {
  for (const auto& perOp : table)
    for (KernelFn kernel : perOp) {
      cudaFuncAttributes attributes;
      RCN_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    }
  return rcnSuccess;
}

}  // namespace rcn
