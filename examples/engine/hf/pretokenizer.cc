// SPDX-License-Identifier: BSD-3-Clause
#include "pretokenizer.h"

#include "model.h"

#ifdef ENGINE_HF_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace engine::hf {

void RegexSplitter::fail(const std::string& what) const {
  throw EngineError(owner_.empty() ? what : owner_ + ": " + what);
}

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

#ifdef ENGINE_HF_HAVE_PCRE2

namespace {

std::string pcreMessage(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// tokenizers runs these patterns in Oniguruma, where \s is Unicode's
// White_Space; PCRE2's \s under UCP also takes U+180E (Mongolian vowel
// separator, in its \h list), which split such text elsewhere. So \s and
// \S become the property (inside classes too); an escaped backslash is
// copied as it is.
std::string withUnicodeWhiteSpace(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];
    if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

}  // namespace

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  pcre2_match_context* limits = nullptr;
  ~Compiled() {
    pcre2_match_context_free(limits);
    pcre2_code_free(code);
  }
};

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& owner)
    : compiled_(std::make_unique<Compiled>()), owner_(owner) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \w, \d and [[:classes:]] follow Unicode properties, as in
  // tokenizers' Oniguruma; \s is made its White_Space.
  const std::string translated = withUnicodeWhiteSpace(pattern);
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!compiled_->code)
    fail("pre-tokenizer regex does not compile at offset " + std::to_string(offset) + ": " + pcreMessage(error) +
         " (pattern " + translated + ")");
  compiled_->limits = pcre2_match_context_create(nullptr);
  if (!compiled_->limits) fail("pre-tokenizer: out of memory");
  pcre2_set_match_limit(compiled_->limits, kPretokenizerMatchLimit);
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

std::vector<std::string> RegexSplitter::split(const std::string& text) const {
  std::vector<std::string> pieces;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  if (!match) fail("cannot encode the text: pre-tokenizer: out of memory");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0, gapStart = 0;
  uint32_t options = 0;  // the first call checks the whole subject is valid UTF-8
  while (start <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), start, options, match, compiled_->limits);
    options = PCRE2_NO_UTF_CHECK;
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_MATCHLIMIT) {
      pcre2_match_data_free(match);
      fail("cannot encode the text: the pre-tokenizer regex backtracks more than " +
           std::to_string(kPretokenizerMatchLimit) + " steps at byte " + std::to_string(start) +
           " of the text (a pattern such as (a+)+b; the tokenizers patterns of Llama 3, Qwen2 and GPT-2 "
           "need a few)");
    }
    if (rc < 0) {
      pcre2_match_data_free(match);
      fail("cannot encode the text: pre-tokenizer: cannot split the text: " + pcreMessage(rc));
    }
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
    const size_t begin = span[0], end = span[1];
    if (end == begin) {
      // An empty match cuts the text there and yields no piece of its own
      // (tokenizers drops empty pieces); the search goes on one whole
      // character past it (from the last cut instead, every search would
      // scan the same span again: quadratic for a pattern such as (?=\p{Lu})).
      if (begin > gapStart) pieces.emplace_back(text, gapStart, begin - gapStart);
      gapStart = begin;
      start = begin + 1;
      while (start < text.size() && (uint8_t(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (begin > gapStart) pieces.emplace_back(text, gapStart, begin - gapStart);
    pieces.emplace_back(text, begin, end - begin);
    gapStart = start = end;
  }
  pcre2_match_data_free(match);
  if (gapStart < text.size()) pieces.emplace_back(text, gapStart, text.size() - gapStart);
  return pieces;
}

#else  // no PCRE2

struct RegexSplitter::Compiled {};

RegexSplitter::RegexSplitter(const std::string&, const std::string& owner) : owner_(owner) {
  fail("built without PCRE2: tokenizer.json needs it (install libpcre2-dev and rebuild)");
}
RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
std::vector<std::string> RegexSplitter::split(const std::string& text) const { return {text}; }

#endif

}  // namespace engine::hf
