// SPDX-License-Identifier: BSD-3-Clause
// GPU presence for tests. A Catch2 test case that needs n GPUs starts with
// requireGpus(n) (support/gpu_case.h); a program that is not a Catch2 test
// calls exitUnlessGpus(n).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>

// In a function returning int: on a CUDA error, prints file:line, the call
// and the error, and returns `code`.
#define RETURN_ON_CUDA_ERROR(call, code)                                                        \
  do {                                                                                          \
    cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      return code;                                                                              \
    }                                                                                           \
  } while (0)

namespace rcn::test {

// Number of CUDA devices, 0 when there is no driver or no GPU. Does not
// create a context, so it is safe before fork().
int gpuCount();

// ROCENANTE_TEST_SHARE_GPUS: a case written for more GPUs than the machine has
// runs anyway, where it places its ranks with rankDevice.
bool shareGpus();
// The GPU of `rank` in a case that gives each rank its own: rank % gpuCount().
int rankDevice(int rank);

// Prints why and exits with 77, which ctest reports as skipped, unless at
// least n GPUs are present.
void exitUnlessGpus(int n);

}  // namespace rcn::test
