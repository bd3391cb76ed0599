// SPDX-License-Identifier: BSD-3-Clause
// llama2.c's tokenizer.bin (--tokenizer FILE), then a round trip of a text
// through it. The first byte picks the vocabulary size the model claims.
#include <cstdint>

#include "fuzz_input.h"
#include "model.h"
#include "tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int vocabSize = data[0] * 4;  // 0..1020: small claims, and 0 and mismatches
  const rcn::fuzz::InputFile file(data + 1, size - 1);
  try {
    const engine::Llama2cTokenizer tokenizer(file.path(), vocabSize);
    const std::vector<int> tokens = tokenizer.encode("Once upon a time, \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 12", true);
    (void)tokenizer.decodeAll(tokens);
    for (int t = -1; t <= tokenizer.vocabSize(); t++) (void)tokenizer.decode(1, t);
  } catch (const engine::EngineError&) {}
  return 0;
}
