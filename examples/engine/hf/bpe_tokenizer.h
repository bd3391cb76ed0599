// SPDX-License-Identifier: BSD-3-Clause
// Hugging Face tokenizer.json, byte-level BPE (GPT-2, Llama 3, Qwen2/3):
//   1. added/special tokens are cut out of the text first, verbatim;
//   2. the pre-tokenizer regex splits the rest into pieces;
//   3. each piece's bytes are spelled in the byte-level alphabet and merged
//      by BPE, lowest merge rank first, into vocabulary tokens;
//   4. the post-processor's template adds e.g. <|begin_of_text|>.
// Decoding maps the alphabet back to bytes. Normalizers other than NFC are
// rejected; NFC is accepted but not applied (input is taken as already NFC).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "added_trie.h"
#include "pretokenizer.h"

namespace engine::hf {

class BpeTokenizer {
 public:
  struct AddedToken {
    std::string content;
    int id = -1;
    bool special = false;
  };

  // Throws EngineError naming the file and what in it is unsupported or
  // malformed; "built without PCRE2 ..." when the build has no PCRE2.
  explicit BpeTokenizer(const std::string& path);

  // Token ids of `text`; `addSpecial` adds the post-processor's tokens (BOS).
  std::vector<int> encode(const std::string& text, bool addSpecial) const;

  // The bytes of one token (added tokens verbatim). Several tokens may share
  // one UTF-8 character, so print these bytes without re-encoding them.
  std::string decodeToken(int token) const;
  // All of `tokens`; `skipSpecial` leaves out special added tokens.
  std::string decode(const std::vector<int>& tokens, bool skipSpecial) const;

  // The id of a vocabulary or added token, -1 when absent.
  int tokenId(const std::string& content) const;
  int vocabSize() const { return int(pieces_.size()); }
  // The post-processor's tokens that encode(..., true) puts in front of the text.
  const std::vector<int>& prefix() const { return prefix_; }

 private:
  void encodeText(const std::string& text, std::vector<int>& out) const;
  void encodePiece(const std::string& piece, std::vector<int>& out) const;
  int mergeRank(const std::string& left, const std::string& right) const;

  std::string path_;
  std::vector<std::string> pieces_;              // id -> vocabulary string (alphabet-spelled)
  std::unordered_map<std::string, int> ids_;     // vocabulary string -> id
  std::unordered_map<std::string, int> ranks_;   // left + '\0' + right -> merge rank
  std::vector<AddedToken> added_;                // in the file's order
  AddedTrie addedTrie_;                          // content -> index in added_
  std::vector<bool> addedId_;                   // id -> an added token (decoded verbatim)
  std::vector<bool> special_;                    // id -> a special added token
  std::vector<RegexSplitter> splitters_;         // applied in order
  bool ignoreMerges_ = false;                    // a piece already in the vocabulary is one token
  bool nfc_ = false;                             // the NFC normalizer, applied between added tokens
  bool addPrefixSpace_ = false;
  size_t prefixSpaceStep_ = 0;  // the ByteLevel step's place among splitters_
  std::vector<int> prefix_, suffix_;             // post-processor's tokens around the text
};

}  // namespace engine::hf
