// SPDX-License-Identifier: BSD-3-Clause
// config.json of a Hugging Face checkpoint: read, then checked against what
// the engine runs, and its RoPE frequencies computed.
#include <cstdint>

#include "fuzz_input.h"
#include "hf_config.h"
#include "model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static rcn::fuzz::ScratchDir dir;
  dir.put("config.json", data, size);
  try {
    const engine::hf::HfConfig config = engine::hf::readHfConfig(dir.path(), 0);
    engine::hf::requireEngineSupport(config);
    (void)engine::hf::ropeFrequencies(config);
  } catch (const engine::EngineError&) {}
  return 0;
}
