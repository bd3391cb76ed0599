// SPDX-License-Identifier: BSD-3-Clause
#include "byte_unicode.h"

#include <array>
#include <unordered_map>

namespace engine::hf {

namespace {

bool standsForItself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Alphabet {
  std::array<std::string, 256> text;
  std::unordered_map<uint32_t, uint8_t> byteOf;  // code point -> byte

  Alphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = standsForItself(b) ? uint32_t(b) : next++;
      appendUtf8(cp, text[b]);
      byteOf[cp] = uint8_t(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

// Decodes the UTF-8 character at text[i]; returns its length (1 for a stray byte).
size_t nextCodepoint(const std::string& text, size_t i, uint32_t& cp) {
  const uint8_t lead = uint8_t(text[i]);
  size_t len = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
  if (i + len > text.size()) len = 1;
  cp = len == 1 ? lead : lead & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (uint8_t(text[i + k]) & 0x3f);
  return len;
}

}  // namespace

const std::string& byteToUnicode(uint8_t byte) { return alphabet().text[byte]; }

void unicodeToBytes(const std::string& text, std::string& out) {
  const auto& byteOf = alphabet().byteOf;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t len = nextCodepoint(text, i, cp);
    auto it = byteOf.find(cp);
    if (it != byteOf.end()) out += char(it->second);
    else out.append(text, i, len);
    i += len;
  }
}

void appendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace engine::hf
