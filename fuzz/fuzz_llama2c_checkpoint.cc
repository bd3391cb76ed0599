// SPDX-License-Identifier: BSD-3-Clause
// A llama2.c checkpoint (--model FILE): a 7-int header, then fp32 weights.
// Any file loads or is refused with EngineError naming it.
#include <cstdint>

#include "fuzz_input.h"
#include "llama2c_loader.h"
#include "model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rcn::fuzz::InputFile file(data, size);
  try {
    (void)engine::readLlama2cConfig(file.path());
    (void)engine::loadLlama2c(file.path());
  } catch (const engine::EngineError&) {}
  return 0;
}
