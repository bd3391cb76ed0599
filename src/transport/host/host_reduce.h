// SPDX-License-Identifier: BSD-3-Clause
// The host backend's reduction: inputs summed (or multiplied, ...) in rank
// order with the same accumulation types and conversions as the device
// kernels (fp32 for 16- and 8-bit floats, wrapping integers), so every rank
// computes bit-identical output.
#pragma once

#include <cstddef>

#include "rocenante/rocenante.h"

namespace rcn {

// out[i] = op over r = 0..nranks-1 of inputs[r][i], in that order. out may
// alias one of the inputs.
void hostReduce(const void* const* inputs, int nranks, void* out, size_t count,
                rcnDataType_t dtype, rcnRedOp_t op);

}  // namespace rcn
