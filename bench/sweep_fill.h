// Device-side input and poison for the sweep's buffer pools.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "rocenante/rocenante.h"

namespace rcn::bench {

// Writes rank's pattern (sweep_pattern.h) into `slots` buffers of `count`
// elements each, `strideBytes` apart, starting at base.
cudaError_t fillPatternDevice(void* base, size_t slots, size_t strideBytes, size_t count,
                              rcnDataType_t dtype, uint64_t seed, int rank, cudaStream_t stream);

}  // namespace rcn::bench
