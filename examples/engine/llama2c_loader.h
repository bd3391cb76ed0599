// SPDX-License-Identifier: BSD-3-Clause
// llama2.c checkpoints ("legacy" format, fp32): a 7-int header, then the
// weights in a fixed order (see ../shared/models/README.md).
#pragma once

#include <string>

#include "model.h"

namespace engine {

// Reads the whole checkpoint. Throws EngineError naming the file when it is
// missing, truncated, or has an impossible header.
ModelWeights loadLlama2c(const std::string& path);

// The checkpoint's config from its header alone (no weights read).
ModelConfig readLlama2cConfig(const std::string& path);

}  // namespace engine
