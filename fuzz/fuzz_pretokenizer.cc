// SPDX-License-Identifier: BSD-3-Clause
// The pre-tokenizer's Split regex from tokenizer.json, run on a text: the
// input's first line is the pattern, the rest the text. The pieces must
// give the text back whole, in order.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model.h"
#include "pretokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == std::string::npos) return 0;
  const std::string text = input.substr(newline + 1);
  try {
    const engine::hf::RegexSplitter splitter(input.substr(0, newline));
    std::string joined;
    for (const std::string& piece : splitter.split(text)) joined += piece;
    if (joined != text) abort();
  } catch (const engine::EngineError&) {}
  return 0;
}
