// SPDX-License-Identifier: BSD-3-Clause
#include "tokenizer.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "bpe_merge.h"
#include "input_file.h"
#include "model.h"

namespace engine {

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int vocabSize) {
  size_t bytes = 0;
  InputFile f = openInputFile(path, "llama2.c tokenizer", &bytes);
  int32_t maxTokenLength = 0;
  if (std::fread(&maxTokenLength, sizeof maxTokenLength, 1, f.get()) != 1) {
    const int err = errno;  // read before the text allocates
    throw EngineError(path + (std::ferror(f.get()) ? std::string(": cannot read (") + std::strerror(err) + ")"
                                                   : std::string(": shorter than the tokenizer's 4-byte header")));
  }
  pieces_.resize(vocabSize);
  scores_.resize(vocabSize);
  for (int i = 0; i < vocabSize; ++i) {
    int32_t length = 0;
    if (std::ftell(f.get()) == long(bytes))  // the file ends at a token's boundary: a shorter vocabulary
      throw EngineError(path + ": has " + std::to_string(i) + " tokens, fewer than the model's " +
                        std::to_string(vocabSize) + " (a tokenizer of another model?)");
    if (std::fread(&scores_[i], sizeof(float), 1, f.get()) != 1 ||
        std::fread(&length, sizeof length, 1, f.get()) != 1 || length < 0 || length > maxTokenLength)
      throw EngineError(path + ": truncated or corrupt at token " + std::to_string(i) + " of " +
                        std::to_string(vocabSize));
    // A NaN score never compares, so its merges would silently never happen.
    if (std::isnan(scores_[i])) throw EngineError(path + ": token " + std::to_string(i) + " has a NaN score");
    // A length past the file's end is corrupt, not a reason to allocate it.
    const long at = std::ftell(f.get());
    if (at < 0 || size_t(at) > bytes || size_t(length) > bytes - size_t(at))
      throw EngineError(path + ": truncated at token " + std::to_string(i));
    pieces_[i].resize(length);
    if (length > 0 && std::fread(&pieces_[i][0], 1, length, f.get()) != size_t(length))
      throw EngineError(path + ": truncated at token " + std::to_string(i));
    ids_.emplace(pieces_[i], i);  // first id wins for duplicate pieces
  }
  // The file holds exactly the model's vocabulary: more means a tokenizer of another model.
  if (std::fgetc(f.get()) != EOF)
    throw EngineError(path + ": has more than the model's " + std::to_string(vocabSize) +
                      " tokens (a tokenizer of another model?)");
}

int Llama2cTokenizer::lookup(const std::string& piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int> Llama2cTokenizer::encode(const std::string& text, bool addBos) const {
  std::vector<int> tokens;
  if (addBos) tokens.push_back(kBos);
  // sentencepiece's add_dummy_prefix: the text is read as if it began with a space.
  if (!text.empty()) {
    int space = lookup(" ");
    if (space >= 0) tokens.push_back(space);
  }

  // One token per UTF-8 character, or one byte token per byte when the
  // character is not in the vocabulary.
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    while (i + len < text.size() && len < 4 && (uint8_t(text[i + len]) & 0xC0) == 0x80) ++len;
    std::string character = text.substr(i, len);
    int id = lookup(character);
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (char byte : character) tokens.push_back(byteToken(uint8_t(byte)));
    }
    i += len;
  }

  // Merge the best-scoring adjacent pair until no pair is in the vocabulary
  // (a score of -1e10 or less, as in llama2.c, never merges); BOS never merges.
  const size_t first = addBos ? 1 : 0;
  std::vector<int> merged = mergePairs(std::vector<int>(tokens.begin() + first, tokens.end()),
                                       [&](int left, int right) -> std::optional<std::pair<float, int>> {
                                         const int id = lookup(pieces_[left] + pieces_[right]);
                                         if (id < 0 || !(scores_[id] > -1e10f)) return std::nullopt;
                                         return std::make_pair(-scores_[id], id);
                                       });
  tokens.resize(first);
  tokens.insert(tokens.end(), merged.begin(), merged.end());
  return tokens;
}

// llama2.c's byte fallback: byte b is token b + 3 (<0x00> .. <0xFF>).
int Llama2cTokenizer::byteToken(uint8_t byte) const {
  const int id = int(byte) + 3;
  if (id >= vocabSize()) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", byte);
    throw EngineError(std::string("prompt: byte ") + hex + " has no token of its own and no byte token (the " +
                      std::to_string(vocabSize()) + "-token vocabulary ends before llama2.c's byte tokens 3-258 do)");
  }
  return id;
}

std::string Llama2cTokenizer::decode(int previous, int token) const {
  if (token < 0 || token >= vocabSize()) return "";
  const std::string& piece = pieces_[token];
  if (previous == kBos && !piece.empty() && piece[0] == ' ') return piece.substr(1);
  unsigned byte = 0;
  if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%02X>", &byte) == 1)
    return std::string(1, char(byte));
  return piece;
}

std::string Llama2cTokenizer::decodeAll(const std::vector<int>& tokens) const {
  std::string text;
  int previous = kBos;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i == 0 && tokens[i] == kBos) continue;
    text += decode(previous, tokens[i]);
    previous = tokens[i];
  }
  return text;
}

}  // namespace engine
