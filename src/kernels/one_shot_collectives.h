// SPDX-License-Identifier: BSD-3-Clause
// The p2p path's one-shot all-gather and reduce-scatter kernels, as the host
// sees them. Both use the all-reduce's exchange region, call counter and LL
// protocol (kernels/one_shot.h): a rank's share of the call (the all-gather's
// send buffer, or the block of the reduce-scatter's send buffer a peer
// owns) goes to every peer as tagged 16-byte lines in one step, so a call
// takes what an all-reduce of one share takes. The lines hold
// ROCENANTE_LL_MAX_BYTES per rank, which bounds a share (maxShareBytes).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/one_shot.h"

namespace rcn {

// args.count is the all-gather's share in BYTES (the kernel moves bytes, one
// instance for every type), the reduce-scatter's recvcount in elements;
// args.signature is callSignature with the collective. The grid is
// oneShotGrid of the share's bytes, which must be LL.
rcnResult_t launchAllGather(const OneShotArgs& args, const OneShotGrid& grid, const OneShotLaunchOptions& options,
                            cudaStream_t stream);
rcnResult_t launchReduceScatter(const OneShotArgs& args, rcnDataType_t dtype, rcnRedOp_t op, const OneShotGrid& grid,
                                const OneShotLaunchOptions& options, cudaStream_t stream);

// Loads every instance on the current device now (kernel_launch.cuh's preloadKernels says why).
rcnResult_t preloadCollectiveKernels();

}  // namespace rcn
