// SPDX-License-Identifier: BSD-3-Clause
// llama2.c's tokenizer (tokenizer.bin): a sentencepiece-trained BPE vocabulary
// with a score per token. Encoding starts from single UTF-8 characters (bytes
// that have no token fall back to the <0xXX> tokens, ids 3..258) and repeatedly
// merges the adjacent pair whose merged string has the highest score.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace engine {

class Llama2cTokenizer {
 public:
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;

  // Throws EngineError when the file is missing or truncated.
  Llama2cTokenizer(const std::string& path, int vocabSize);

  std::vector<int> encode(const std::string& text, bool addBos) const;

  // The text of `token` as it follows `previous` (a leading space after BOS
  // is dropped, byte tokens become their byte).
  std::string decode(int previous, int token) const;

  // All of `tokens` back to text (skipping a leading BOS).
  std::string decodeAll(const std::vector<int>& tokens) const;

  int vocabSize() const { return int(pieces_.size()); }

 private:
  int lookup(const std::string& piece) const;
  int byteToken(uint8_t byte) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;
};

}  // namespace engine
