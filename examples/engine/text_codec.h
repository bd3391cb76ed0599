// SPDX-License-Identifier: BSD-3-Clause
// Text in and out of the CLI (--tokenizer): the prompt's token ids, the bytes
// to print for each generated token, and the tokens that end generation.
// llama2.c's tokenizer.bin, or a Hugging Face tokenizer.json (through
// rcn_engine_hf, which needs PCRE2 for it); without a tokenizer the prompt
// is the BOS token alone and the output is token ids.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace engine {

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // The prompt's tokens, BOS first where the tokenizer adds one; never empty.
  virtual std::vector<int> encode(const std::string& text) const = 0;
  // What to print for `token` when it follows `previous`.
  virtual std::string decode(int previous, int token) const = 0;
  // Generation ends at this token (it is not printed).
  bool isStop(int token) const;
  // The prompt `tokens` = encode(text) as the runners echo it: all but the
  // tokens encode put in front (BOS).
  std::string promptText(const std::string& text, const std::vector<int>& tokens) const;

 protected:
  // How many of the first tokens of tokens = encode(text) encode added (and so are not echoed).
  virtual size_t addedInFront(const std::string& text, const std::vector<int>& tokens) const = 0;

  std::vector<int> stops_;
};

// Throws EngineError unless the prompt leaves room in a context of `context`
// positions for at least one generated token.
void requirePromptFits(const std::vector<int>& prompt, int context);

// The generated text as the CPU and GPU runners stream it: the prompt echoed,
// then each token printed (where `print`: rank 0, not --quiet) until a stop
// token, counted either way.
class TokenStream {
 public:
  TokenStream(const TextCodec& codec, bool print) : codec_(codec), print_(print) {}
  void echoPrompt(const std::string& text, const std::vector<int>& prompt) const;
  // Takes `next`, which follows `previous`; false at a stop token (not
  // printed): generation ends there.
  bool accept(int previous, int next);
  int generated() const { return generated_; }
  // Once generation is over: when it made fewer than `steps` tokens without
  // reaching a stop token, the context of `context` positions filled up
  // first, and a note on stderr says so. Not an error: the run succeeds.
  void noteContextEnd(int steps, int context) const;

 private:
  const TextCodec& codec_;
  const bool print_;
  int generated_ = 0;
  bool stopped_ = false;  // at a stop token, not at the end of the context
};

// The codec for --model `modelPath` and --tokenizer `tokenizerPath` (may be
// empty). A tokenizer path ending in .json, or none with a Hugging Face model
// directory holding tokenizer.json, selects tokenizer.json; stops are the
// directory's config.json eos_token_id. Otherwise tokenizer.bin (llama2.c,
// stops at BOS and EOS); a tokenizer file whose content starts like JSON is
// read as tokenizer.json whatever its name. Throws EngineError naming the
// file and the problem, and when the user gave a prompt (promptGiven) that
// no tokenizer can encode.
std::unique_ptr<TextCodec> openTextCodec(const std::string& modelPath, const std::string& tokenizerPath, int vocab,
                                         bool promptGiven);

}  // namespace engine
