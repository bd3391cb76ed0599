// Prompt in, streamed text out, on the float32 CPU path. --tp N starts N
// processes of this program (launcher.h), each holding its shard of the
// weights and joined by rcnAllReduce over rocenante's host backend.
#pragma once

#include "options.h"

namespace engine {

int runCpu(const EngineOptions& options, int argc, char** argv);

}  // namespace engine
