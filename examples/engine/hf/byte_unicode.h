// SPDX-License-Identifier: BSD-3-Clause
// GPT-2's byte-level alphabet: each of the 256 byte values is written as one
// printable Unicode character, so BPE vocabularies of byte sequences are
// plain strings. Printable Latin-1 bytes stand for themselves; the others
// (controls, space, ...) map to U+0100 onwards in byte order, e.g. ' ' -> 'Ġ'.
#pragma once

#include <cstdint>
#include <string>

namespace engine::hf {

// The UTF-8 text of the character that stands for `byte`.
const std::string& byteToUnicode(uint8_t byte);

// Maps a vocabulary string back to bytes, appending to `out`. Characters
// outside the alphabet (e.g. in added tokens) are copied through as UTF-8.
void unicodeToBytes(const std::string& text, std::string& out);

// Appends the UTF-8 encoding of `codepoint` to `out`.
void appendUtf8(uint32_t codepoint, std::string& out);

}  // namespace engine::hf
