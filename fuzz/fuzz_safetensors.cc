// SPDX-License-Identifier: BSD-3-Clause
// One .safetensors file: an 8-byte header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the data.
#include <cstdint>

#include "fuzz_input.h"
#include "model.h"
#include "safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rcn::fuzz::InputFile file(data, size);
  try {
    const engine::hf::SafetensorsFile tensors(file.path());
    for (const auto& entry : tensors.tensors()) (void)entry.second.elements();
  } catch (const engine::EngineError&) {}
  return 0;
}
