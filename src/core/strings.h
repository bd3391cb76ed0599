// SPDX-License-Identifier: BSD-3-Clause
// String helpers shared by the library, the benchmark, the probe and the
// engine. Header-only, so that the engine, which links only the public
// library, uses the same copy.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rcn {

// text without leading and trailing spaces, tabs, carriage returns and newlines.
inline std::string trim(const std::string& text) {
  const char* blanks = " \t\r\n";
  const size_t first = text.find_first_not_of(blanks);
  if (first == std::string::npos) return std::string();
  return text.substr(first, text.find_last_not_of(blanks) - first + 1);
}

// The pieces of text between separators, empty pieces left out ("a,,b" gives a and b).
inline std::vector<std::string> splitNonEmpty(const std::string& text, char separator) {
  std::vector<std::string> pieces;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) pieces.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return pieces;
}

// Lower-case hex of bytes.
inline std::string toHex(const void* data, size_t bytes) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char* p = static_cast<const unsigned char*>(data);
  std::string hex;
  hex.reserve(bytes * 2);
  for (size_t i = 0; i < bytes; ++i) {
    hex += digits[p[i] >> 4];
    hex += digits[p[i] & 15];
  }
  return hex;
}

// hex (either case) as bytes; false on an odd length or a non-hex digit.
inline bool fromHex(const std::string& hex, std::vector<unsigned char>* out) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2) return false;
  std::vector<unsigned char> bytes(hex.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  *out = std::move(bytes);
  return true;
}

}  // namespace rcn
