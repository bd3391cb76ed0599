// SPDX-License-Identifier: BSD-3-Clause
// The pre-tokenizer step of tokenizer.json: text is cut into pieces by a
// Unicode regex before BPE runs on each piece. The pattern comes from the
// file (Llama 3 and Qwen2 use \p{L}, \p{N}, (?i:'s|'t|...) and lookahead), so
// it runs on PCRE2 with UTF and UCP; builds without PCRE2 report that when a
// tokenizer.json is loaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace engine::hf {

// GPT-2's pattern, which a ByteLevel pre-tokenizer with use_regex=true applies.
extern const char* const kGpt2SplitPattern;

// The most backtracking steps (PCRE2's match limit) one search may take.
// The split runs at most one search per byte of text, so its work is linear
// in the text even for a pattern that backtracks exponentially; the patterns
// real tokenizers use take a few steps a search.
constexpr uint32_t kPretokenizerMatchLimit = 10000;

// Splits text into the regex's matches and the gaps between them, in order,
// none dropped (tokenizers' "Isolated" behavior).
class RegexSplitter {
 public:
  // Throws EngineError when the pattern does not compile (or there is no
  // PCRE2). owner (the tokenizer.json path, say) starts every error message.
  explicit RegexSplitter(const std::string& pattern, const std::string& owner = "");
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Throws EngineError when `text` is not valid UTF-8, or when one search
  // needs more than kPretokenizerMatchLimit steps.
  std::vector<std::string> split(const std::string& text) const;

 private:
  [[noreturn]] void fail(const std::string& what) const;

  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string owner_;
};

}  // namespace engine::hf
