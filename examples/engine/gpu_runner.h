// SPDX-License-Identifier: BSD-3-Clause
// The GPU side of rcn_engine: rank setup (device, rcn communicator), model
// construction, streamed generation, and the --bench measurements.
#pragma once

#include "options.h"

namespace engine {

bool gpuAvailable();
// Throws EngineError naming why when this process cannot use a CUDA GPU (--device gpu).
void requireGpu();

// Runs the options on the GPU; with --tp N > 1 (and no --rank) launches N
// rank processes of this program and waits for them. Returns the exit code.
int runGpu(const EngineOptions& options, int argc, char** argv);

}  // namespace engine
