// SPDX-License-Identifier: BSD-3-Clause
// Prompt in, streamed text out, on the float32 CPU path. --tp N starts N
// processes of this program (launcher.h), or torchrun / mpirun / srun started
// them; each holds its shard of the weights, joined by rcnAllReduce over
// rocenante's host backend.
#pragma once

#include "options.h"

namespace engine {

int runCpu(const EngineOptions& options, int argc, char** argv);

}  // namespace engine
