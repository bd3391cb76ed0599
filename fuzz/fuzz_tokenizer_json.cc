// SPDX-License-Identifier: BSD-3-Clause
// tokenizer.json: vocabulary, merges, added tokens, normalizer, pre-tokenizer
// and post-processor; a tokenizer that loads encodes and decodes a text.
#include <cstdint>
#include <cstdlib>

#include "bpe_tokenizer.h"
#include "fuzz_input.h"
#include "model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rcn::fuzz::InputFile file(data, size);
  try {
    const engine::hf::BpeTokenizer tokenizer(file.path());
    const std::vector<int> tokens = tokenizer.encode("Hello, w\xc3\xb6rld! 12345  's\n\ttabs <|x|>", true);
    (void)tokenizer.decode(tokens, false);
    (void)tokenizer.decode(tokens, true);
    for (int t = 0; t < tokenizer.vocabSize(); t++) (void)tokenizer.decodeToken(t);
    for (int outside : {-1, tokenizer.vocabSize()}) {
      try {
        (void)tokenizer.decodeToken(outside);
        abort();  // an id outside the vocabulary is refused
      } catch (const engine::EngineError&) {}
    }
  } catch (const engine::EngineError&) {}
  return 0;
}
