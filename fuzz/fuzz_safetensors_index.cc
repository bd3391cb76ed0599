// SPDX-License-Identifier: BSD-3-Clause
// model.safetensors.index.json: the weight map naming each tensor's shard.
// The shards it names do not exist here, so past the index the load fails
// by name; what matters is that the index itself is read safely.
#include <cstdint>

#include "fuzz_input.h"
#include "model.h"
#include "safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static rcn::fuzz::ScratchDir dir;
  dir.put("model.safetensors.index.json", data, size);
  try {
    const engine::hf::Checkpoint checkpoint(dir.path());
  } catch (const engine::EngineError&) {}
  return 0;
}
