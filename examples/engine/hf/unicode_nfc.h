// SPDX-License-Identifier: BSD-3-Clause
// Unicode normalization form C for the tokenizer's NFC normalizer (Qwen2,
// Qwen3, GPT-NeoX name it), through ICU when it is built in.
#pragma once

#include <string>

namespace engine::hf {

// Whether toNfc normalizes (ICU found at build time); without it toNfc
// returns its input, which is then taken to be NFC already.
bool nfcAvailable();

// text in NFC. Text that is not valid UTF-8 comes back as it was, for the
// pre-tokenizer to refuse by name.
std::string toNfc(const std::string& text);

}  // namespace engine::hf
