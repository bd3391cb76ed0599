// SPDX-License-Identifier: BSD-3-Clause
// The residual add + RMSNorm on the CPU, after the host backend's all-reduce:
// the bits of the GPU kernels (kernels/norm_math.h defines the order), so a
// test can also check a GPU's output against it bit for bit.
#pragma once

#include "kernels/residual_norm.h"

namespace rcn {

// call's pointers are host memory (normScale too); `sum` holds the rows
// summed over the ranks (call.dtype) and may be call.normOut itself.
void hostResidualNorm(const ResidualNormCall& call, const void* sum);

}  // namespace rcn
