// SPDX-License-Identifier: BSD-3-Clause
// ENGINE_HOST_DEVICE marks the helpers that kernels and host code share
// (argmax keys, attention's shared-memory layout), so that they compile for
// both under nvcc and as plain host code elsewhere, where CI tests them.
#pragma once

#ifdef __CUDACC__
#define ENGINE_HOST_DEVICE __host__ __device__
#else
#define ENGINE_HOST_DEVICE
#endif
