// SPDX-License-Identifier: BSD-3-Clause
#include "text_codec.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>

#include "input_file.h"
#include "model.h"
#include "tokenizer.h"
#ifdef ENGINE_HAVE_HF
#include "bpe_tokenizer.h"
#include "hf_config.h"
#endif

namespace engine {

bool TextCodec::isStop(int token) const { return std::find(stops_.begin(), stops_.end(), token) != stops_.end(); }

std::string TextCodec::promptText(const std::string& text, const std::vector<int>& tokens) const {
  std::string echo;
  for (size_t i = addedInFront(text, tokens); i < tokens.size(); ++i) echo += decode(i ? tokens[i - 1] : -1, tokens[i]);
  return echo;
}

namespace {

bool isDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Of any kind: a tokenizer.json that is no regular file is then refused by
// name when it is read, rather than skipped for token ids without a word.
bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether a tokenizer file holds JSON: a name ending in .json, or a first
// byte '{' followed by a blank or '"'. A tokenizer.bin starts with its
// longest token's length as 4 bytes, which would then be a length in the
// hundreds of millions.
bool isJsonTokenizer(const std::string& path) {
  if (endsWith(path, ".json")) return true;
  size_t bytes = 0;
  const InputFile f = openInputFile(path, "tokenizer", &bytes);  // a regular file, or an error naming it
  char head[2] = {};
  const size_t got = std::fread(head, 1, sizeof head, f.get());
  return got == 2 && head[0] == '{' && (std::isspace(static_cast<unsigned char>(head[1])) || head[1] == '"');
}

// No tokenizer: the prompt is BOS alone and each token prints as its id.
class TokenIdCodec : public TextCodec {
 public:
  TokenIdCodec(int bos, std::vector<int> stops) : bos_(bos) { stops_ = std::move(stops); }
  std::vector<int> encode(const std::string&) const override { return {bos_}; }
  std::string decode(int, int token) const override { return std::to_string(token) + " "; }

 protected:
  size_t addedInFront(const std::string&, const std::vector<int>& tokens) const override { return tokens.size(); }

 private:
  int bos_;
};

class Llama2cCodec : public TextCodec {
 public:
  Llama2cCodec(const std::string& path, int vocab) : tokenizer_(path, vocab) {
    stops_ = {Llama2cTokenizer::kBos, Llama2cTokenizer::kEos};
  }
  std::vector<int> encode(const std::string& text) const override { return tokenizer_.encode(text, true); }
  std::string decode(int previous, int token) const override { return tokenizer_.decode(previous, token); }

 protected:
  size_t addedInFront(const std::string&, const std::vector<int>&) const override { return 1; }  // encode's BOS

 private:
  Llama2cTokenizer tokenizer_;
};

#ifdef ENGINE_HAVE_HF
class TokenizerJsonCodec : public TextCodec {
 public:
  TokenizerJsonCodec(const std::string& path, int vocab, int bos, std::vector<int> stops)
      : tokenizer_(path), path_(path), vocab_(vocab), bos_(bos) {
    stops_ = std::move(stops);
    // Models pad their vocabulary past the tokenizer's (Qwen), never the other way.
    if (tokenizer_.vocabSize() > vocab)
      throw EngineError(path + ": its vocabulary has " + std::to_string(tokenizer_.vocabSize()) +
                        " tokens, more than the model's " + std::to_string(vocab) + " (a tokenizer of another model?)");
  }

  std::vector<int> encode(const std::string& text) const override {
    // The post-processor's tokens in front (a BOS, if it has one), never those
    // it puts after the text: generation continues the text, and an EOS there would end it.
    std::vector<int> ids = tokenizer_.prefix();
    const std::vector<int> body = tokenizer_.encode(text, false);
    ids.insert(ids.end(), body.begin(), body.end());
    if (ids.empty() && bos_ >= 0) ids = {bos_};
    if (ids.empty())
      throw EngineError(path_ + ": the prompt encodes to no tokens and config.json names no bos_token_id");
    for (int id : ids)
      if (id >= vocab_)
        throw EngineError(path_ + ": prompt token " + std::to_string(id) + " lies beyond the model's " +
                          std::to_string(vocab_) + "-token vocabulary (tokenizer of another model?)");
    return ids;
  }

  // One token may be part of a UTF-8 character: its bytes are printed as they are.
  std::string decode(int, int token) const override {
    // Models pad their vocabulary past the tokenizer (Qwen); such a token has no text.
    if (token >= tokenizer_.vocabSize()) return "";
    return tokenizer_.decodeToken(token);
  }

 protected:
  // The post-processor's tokens in front (a BOS; GPT-2 and Qwen add none), or
  // the BOS that encode falls back to for an empty text (byte-level BPE gives
  // any other text a token a byte at least).
  size_t addedInFront(const std::string& text, const std::vector<int>& tokens) const override {
    const size_t prefix = tokenizer_.prefix().size();  // encode puts all of it first
    if (prefix > 0) return prefix;
    return text.empty() ? tokens.size() : 0;
  }

 private:
  hf::BpeTokenizer tokenizer_;
  std::string path_;
  int vocab_, bos_;
};
#endif

}  // namespace

void requirePromptFits(const std::vector<int>& prompt, int context) {
  if (int64_t(prompt.size()) < context) return;
  throw EngineError("the prompt is " + std::to_string(prompt.size()) + " tokens; the model's context holds " +
                    std::to_string(context) + " positions, the prompt's and the generated tokens' together");
}

void TokenStream::echoPrompt(const std::string& text, const std::vector<int>& prompt) const {
  if (!print_) return;
  std::fputs(codec_.promptText(text, prompt).c_str(), stdout);
  std::fflush(stdout);
}

bool TokenStream::accept(int previous, int next) {
  ++generated_;
  if (codec_.isStop(next)) {
    stopped_ = true;
    return false;
  }
  if (print_) {
    std::fputs(codec_.decode(previous, next).c_str(), stdout);
    std::fflush(stdout);
  }
  return true;
}

void TokenStream::noteContextEnd(int steps, int context) const {
  if (stopped_ || generated_ >= steps) return;
  std::fprintf(stderr,
               "rcn_engine: note: generation stopped at the end of the context (%d positions, prompt included) "
               "after %d of --steps %d tokens\n",
               context, generated_, steps);
}

std::unique_ptr<TextCodec> openTextCodec(const std::string& modelPath, const std::string& tokenizerPath, int vocab,
                                         bool promptGiven) {
  const bool hfDirectory = isDirectory(modelPath);
  std::string json = !tokenizerPath.empty() && isJsonTokenizer(tokenizerPath) ? tokenizerPath : "";
  if (tokenizerPath.empty() && hfDirectory && exists(modelPath + "/tokenizer.json"))
    json = modelPath + "/tokenizer.json";
  // llama2.c's ids unless a Hugging Face config.json says otherwise.
  int bos = Llama2cTokenizer::kBos;
  std::vector<int> stops = {Llama2cTokenizer::kBos, Llama2cTokenizer::kEos};
#ifdef ENGINE_HAVE_HF
  if (hfDirectory) {
    const hf::HfConfig config = hf::readHfConfig(modelPath, 0);
    bos = config.bosToken;
    stops = config.eosTokens;
  }
  if (!json.empty()) return std::make_unique<TokenizerJsonCodec>(json, vocab, bos, stops);
#else
  if (!json.empty())
    throw EngineError(json + ": tokenizer.json needs rcn_engine_hf, which this build lacks (it needs nlohmann-json)");
#endif
  if (!tokenizerPath.empty()) return std::make_unique<Llama2cCodec>(tokenizerPath, vocab);
  if (promptGiven)
    throw EngineError("--prompt needs a tokenizer to encode it (--tokenizer PATH, or tokenizer.json in the model's "
                      "directory); without one the prompt is the BOS token alone and tokens print as ids");
  // Without a tokenizer the prompt is BOS alone: one the model cannot embed
  // is config.json's mistake, named here rather than as a bad token later.
  if (bos >= vocab)
    throw EngineError(modelPath + "/config.json: bos_token_id " + std::to_string(bos) + " is outside the vocabulary (" +
                      std::to_string(vocab) + " tokens)");
  return std::make_unique<TokenIdCodec>(bos >= 0 ? bos : Llama2cTokenizer::kBos, stops);
}

}  // namespace engine
