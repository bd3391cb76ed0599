// SPDX-License-Identifier: BSD-3-Clause
// tokenizer.json byte-level BPE (examples/engine/hf/bpe_tokenizer.h) on tiny
// handmade tokenizers whose results can be worked out by hand: merge order,
// both merge spellings, the Llama-3 and GPT-2 split patterns, added and
// special tokens, the post-processor's BOS, and encode/decode round trips.
// Its cases skip when rcn_engine_hf was built without PCRE2.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bpe_tokenizer.h"
#include "cpu_model.h"
#include "sampler.h"
#include "shapes.h"
#include "byte_unicode.h"
#include "model.h"
#include "support/engine_run.h"
#include "unicode_nfc.h"
#include "test_engine_hf_writer.h"
#include "text_codec.h"

using namespace engine;
using Catch::Matchers::ContainsSubstring;
using Json = nlohmann::json;

namespace {

// Llama 3's pre-tokenizer pattern, as its tokenizer.json spells it.
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct TempDir {
  std::string path = hftest::makeTempDir();
  ~TempDir() { hftest::removeDir(path); }
};

// The vocabulary in id order ("Ġ" is the space byte, "Ã" "©" the two bytes of é).
const std::vector<std::string> kVocab = {
    "h", "e", "l", "o", "w", "r", "d", "Ġ", "he", "ll", "lo", "hell", "hello", "Ġw", "or", "Ġwor",  // 0-15
    "ld", "'", "s", "'s", "1", "2", "3", "4", "5", "12", "34", "123", "45", "Ã", "©", "Ã©", "Ċ"};  // 16-32
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"}, {"l", "o"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"},
    {"l", "d"}, {"'", "s"}, {"1", "2"}, {"3", "4"}, {"12", "3"}, {"4", "5"}, {"Ã", "©"}};
constexpr int kEndOfText = 33, kBegin = 34;

enum class Style { Llama3, Gpt2 };

// A tokenizer.json in the shape Llama 3 (Split + ByteLevel, array merges) or
// GPT-2 (ByteLevel with its built-in regex, "a b" merges) files have.
Json tokenizerJson(Style style) {
  Json vocab = Json::object();
  for (size_t i = 0; i < kVocab.size(); ++i) vocab[kVocab[i]] = i;
  Json merges = Json::array();
  for (const auto& [a, b] : kMerges) merges.push_back(style == Style::Llama3 ? Json::array({a, b}) : Json(a + " " + b));
  Json j;
  j["version"] = "1.0";
  j["added_tokens"] = {{{"id", kEndOfText}, {"content", "<|endoftext|>"}, {"special", true}},
                       {{"id", kBegin}, {"content", "<|begin|>"}, {"special", true}}};
  j["normalizer"] = nullptr;
  if (style == Style::Llama3) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    j["post_processor"] = {
        {"type", "Sequence"},
        {"processors",
         {{{"type", "ByteLevel"}, {"trim_offsets", false}},
          {{"type", "TemplateProcessing"},
           {"single", {{{"SpecialToken", {{"id", "<|begin|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
           {"special_tokens", {{"<|begin|>", {{"id", "<|begin|>"}, {"ids", {kBegin}}, {"tokens", {"<|begin|>"}}}}}}}}}};
  } else {
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  }
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false}};
  return j;
}

std::string writeJson(const std::string& dir, const Json& j) {
  const std::string path = dir + "/tokenizer.json";
  std::ofstream(path) << j.dump(1);
  return path;
}

// Skips the case when the library has no PCRE2, after checking it says so.
void requirePcre2(const std::string& path) {
#ifndef ENGINE_HF_HAVE_PCRE2
  try {
    hf::BpeTokenizer tokenizer(path);
  } catch (const EngineError& e) {
    if (std::string(e.what()).find("built without PCRE2") != std::string::npos) SKIP(e.what());
  }
  FAIL("a build without PCRE2 must refuse tokenizer.json with \"built without PCRE2\"");
#else
  (void)path;
#endif
}

std::string errorOf(const std::string& path) {
  try {
    hf::BpeTokenizer tokenizer(path);
  } catch (const EngineError& e) {
    return e.what();
  }
  return "(no error)";
}

using Ids = std::vector<int>;

}  // namespace

// A tokenizer.json under another name is read as one (by its content), and
// one whose vocabulary is larger than the model's is refused as another model's.
TEST_CASE("tokenizer.json is known by its content, and must fit the model's vocabulary") {
  TempDir dir;
  const std::string json = writeJson(dir.path, tokenizerJson(Style::Llama3));
  requirePcre2(json);
  const std::string renamed = dir.path + "/tokenizer_json.txt";
  REQUIRE(std::rename(json.c_str(), renamed.c_str()) == 0);
  const int vocab = hf::BpeTokenizer(renamed).vocabSize();
  const std::vector<int> ids = openTextCodec("", renamed, vocab, true)->encode("hello");
  CHECK_FALSE(ids.empty());
  CHECK_THROWS_WITH(openTextCodec("", renamed, vocab - 1, true),
                    Catch::Matchers::ContainsSubstring("more than the model's " + std::to_string(vocab - 1)));
}

TEST_CASE("byte-level alphabet") {
  CHECK(hf::byteToUnicode(' ') == "Ġ");
  CHECK(hf::byteToUnicode('\n') == "Ċ");
  CHECK(hf::byteToUnicode('a') == "a");
  CHECK(hf::byteToUnicode(0xC3) == "Ã");
  CHECK(hf::byteToUnicode(0xAD) == "Ń");  // soft hyphen is not printable: 256 + 33 + 34 = U+0143
  std::string all, back;
  for (int b = 0; b < 256; ++b) all += hf::byteToUnicode(uint8_t(b));
  hf::unicodeToBytes(all, back);
  REQUIRE(back.size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(uint8_t(back[b]) == b);
}

TEST_CASE("pre-tokenizer regexes split as tokenizers does") {
  TempDir dir;
  requirePcre2(writeJson(dir.path, tokenizerJson(Style::Llama3)));
  const hf::RegexSplitter llama3(kLlama3Pattern);
  CHECK(llama3.split("hello wörld 12345 's") ==
        std::vector<std::string>{"hello", " wörld", " ", "123", "45", " '", "s"});
  CHECK(llama3.split("HELLO'S") == std::vector<std::string>{"HELLO", "'S"});  // (?i:...)
  CHECK(llama3.split("a\n\nb") == std::vector<std::string>{"a", "\n\n", "b"});
  CHECK(llama3.split("") == std::vector<std::string>{});
  const hf::RegexSplitter gpt2(hf::kGpt2SplitPattern);
  CHECK(gpt2.split("a  b 12345") == std::vector<std::string>{"a", " ", " b", " 12345"});
  CHECK(gpt2.split("Grüße, 世界") == std::vector<std::string>{"Grüße", ",", " 世界"});
  CHECK_THROWS_WITH(gpt2.split(std::string("bad \xff utf8")), ContainsSubstring("cannot split"));
  CHECK_THROWS_WITH(hf::RegexSplitter("(unclosed"), ContainsSubstring("does not compile"));
  // \s is Unicode's White_Space, as in tokenizers (Oniguruma): U+180E is
  // not in it (PCRE2's own \s took it), U+3000 and U+0085 are; the pieces
  // below are what tokenizers 0.23 gives with these patterns.
  const std::string mongolianSeparator = "\xe1\xa0\x8e";
  CHECK(gpt2.split(mongolianSeparator + "'re") == std::vector<std::string>{mongolianSeparator + "'", "re"});
  CHECK(llama3.split("a  " + mongolianSeparator) == std::vector<std::string>{"a", " ", " " + mongolianSeparator});
  CHECK(gpt2.split("a\xe3\x80\x80\xe3\x80\x80" "b") == std::vector<std::string>{"a", "\xe3\x80\x80", "\xe3\x80\x80", "b"});
  CHECK(hf::RegexSplitter("[^\\s]+").split("x\xc2\x85y") == std::vector<std::string>{"x", "\xc2\x85", "y"});
  CHECK(hf::RegexSplitter("\\\\s").split("a\\sb") == std::vector<std::string>{"a", "\\s", "b"});  // an escaped backslash
  // A pattern that matches empty text cuts nothing there. Searching again
  // from the last cut, not past the empty match, scanned the same text once
  // per character: this took minutes (the test's timeout), now milliseconds.
  const hf::RegexSplitter beforeCapitals("(?=\\p{Lu})");
  CHECK(beforeCapitals.split("abCdEf") == std::vector<std::string>{"ab", "Cd", "Ef"});  // as tokenizers 0.23 splits
  CHECK(hf::RegexSplitter("\\b").split("ab cd") == std::vector<std::string>{"ab", " ", "cd"});
  CHECK(hf::RegexSplitter("x*").split("axxb") == std::vector<std::string>{"a", "xx", "b"});
  const std::string longRun(200000, 'a');
  CHECK(beforeCapitals.split(longRun + "B") == std::vector<std::string>{longRun, "B"});
}

TEST_CASE("a pre-tokenizer regex that backtracks without end is a clear error, not a hang") {
  TempDir dir;
  requirePcre2(writeJson(dir.path, tokenizerJson(Style::Llama3)));
  // Each run of a's costs (?:a+)+b some 2^run steps; with PCRE2's default
  // limit (10^7 a search) this 6.6 KB prompt took many minutes.
  std::string prompt;
  while (prompt.size() < 6600) prompt += "aaaaaaaaaaaaaaaaaaaaaa ";
  const hf::RegexSplitter backtracking("(?:a+)+b|a| ");
  CHECK_THROWS_WITH(backtracking.split(prompt),
                    ContainsSubstring("the pre-tokenizer regex backtracks more than 10000 steps at byte 0"));
  CHECK(backtracking.split("aaab a") == std::vector<std::string>{"aaab", " ", "a"});  // short runs still split
  // The real patterns stay far under the limit on long, mixed text.
  std::string mixed;
  for (int i = 0; i < 2000; i++) mixed += "Word's  12345\n\n\t  x" + std::string(i % 7, ' ');
  mixed += std::string(100000, ' ') + std::string(100000, '\n') + "end";
  CHECK_NOTHROW(hf::RegexSplitter(kLlama3Pattern).split(mixed));
  CHECK_NOTHROW(hf::RegexSplitter(hf::kGpt2SplitPattern).split(mixed));
}

TEST_CASE("BPE merges lowest rank first, in both merge spellings") {
  TempDir dir;
  for (Style style : {Style::Llama3, Style::Gpt2}) {
    const std::string path = writeJson(dir.path, tokenizerJson(style));
    requirePcre2(path);
    const hf::BpeTokenizer tok(path);
    INFO((style == Style::Llama3 ? "llama3 style" : "gpt2 style"));
    // h e l l o: he(0) -> ll(1) -> hell(3) -> hello(4).
    CHECK(tok.encode("hello", false) == Ids{12});
    // Ġ w o r l d: Ġw(5) -> or(6) -> Ġwor(7) -> ld(8).
    CHECK(tok.encode(" world", false) == Ids{15, 16});
    CHECK(tok.encode("hello world", false) == Ids{12, 15, 16});
    // h o l l o w: ll(1) beats lo(2), and "ll o" is no merge.
    CHECK(tok.encode("hollow", false) == Ids{0, 3, 9, 3, 4});
    CHECK(tok.encode("hello's", false) == Ids{12, 19});
    CHECK(tok.encode("é", false) == Ids{31});
    CHECK(tok.encode("hello\n", false) == Ids{12, 32});
    CHECK(tok.vocabSize() == 35);
    CHECK(tok.tokenId("hello") == 12);
    CHECK(tok.tokenId("<|endoftext|>") == kEndOfText);
    CHECK(tok.tokenId("nope") == -1);
  }
}

TEST_CASE("the split pattern comes from the file") {
  TempDir dir;
  // Llama 3 cuts digits in threes: "123" "45"; GPT-2 keeps "12345" whole, and
  // there 1 2 -> 12, 3 4 -> 34 (rank 11 before 12 3 at rank 12), 5 stays.
  const std::string llamaPath = writeJson(dir.path, tokenizerJson(Style::Llama3));
  requirePcre2(llamaPath);
  CHECK(hf::BpeTokenizer(llamaPath).encode("12345", false) == Ids{27, 28});
  const std::string gptPath = writeJson(dir.path, tokenizerJson(Style::Gpt2));
  CHECK(hf::BpeTokenizer(gptPath).encode("12345", false) == Ids{25, 26, 24});
}

// The longest added token that starts at a position wins, whatever the
// file's order; a prefix of one that does not follow in full is plain text.
TEST_CASE("added tokens that share a prefix: the longest match wins") {
  TempDir dir;
  Json j = tokenizerJson(Style::Llama3);
  j["added_tokens"] = {{{"id", kEndOfText}, {"content", "<|e"}, {"special", true}},
                       {{"id", kBegin}, {"content", "<|ehello|>"}, {"special", true}},
                       {{"id", 35}, {"content", "<|eh"}, {"special", false}},
                       {{"id", 36}, {"content", "<|eh"}, {"special", false}}};  // content twice: the first
  const std::string path = writeJson(dir.path, j);
  requirePcre2(path);
  const hf::BpeTokenizer tok(path);
  CHECK(tok.encode("<|ehello|>", false) == Ids{kBegin});
  CHECK(tok.encode("<|ehello", false) == Ids{35, 1, 9, 3});
  CHECK(tok.encode("<|eworld", false) == Ids{kEndOfText, 4, 14, 16});
  CHECK(tok.encode("hello<|e", false) == Ids{12, kEndOfText});
  // Many near-misses of the longest one, as a prompt could hold.
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "<|ehell";
  CHECK(tok.encode(text, false).size() == 60000);
  j["added_tokens"][0]["content"] = std::string(1025, 'x');
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("1 to 1024 bytes of content"));
}

TEST_CASE("added tokens, special tokens and the post-processor") {
  TempDir dir;
  const std::string path = writeJson(dir.path, tokenizerJson(Style::Llama3));
  requirePcre2(path);
  const hf::BpeTokenizer tok(path);
  CHECK(tok.encode("hello<|endoftext|> world", false) == Ids{12, kEndOfText, 15, 16});
  CHECK(tok.encode("<|endoftext|><|endoftext|>", false) == Ids{kEndOfText, kEndOfText});
  CHECK(tok.encode("hello", true) == Ids{kBegin, 12});
  CHECK_THROWS_WITH(tok.encode("bad \xff text", false), ContainsSubstring("tokenizer.json: cannot encode the text"));
  CHECK(tok.encode("", true) == Ids{kBegin});
  CHECK(tok.decode({kBegin, 12, kEndOfText, 15, 16}, false) == "<|begin|>hello<|endoftext|> world");
  CHECK(tok.decode({kBegin, 12, kEndOfText, 15, 16}, true) == "hello world");
  CHECK(tok.decodeToken(31) == "é");
  CHECK(tok.decodeToken(29) == "\xC3");  // half a character: bytes, not re-encoded
  CHECK_THROWS_WITH(tok.decodeToken(99), ContainsSubstring("outside"));
  // The GPT-2 style file has no template: no BOS.
  const std::string gpt = writeJson(dir.path, tokenizerJson(Style::Gpt2));
  CHECK(hf::BpeTokenizer(gpt).encode("hello", true) == Ids{12});
  // add_prefix_space puts a space in front of each text between added tokens
  // (ids from tokenizers 0.23 on the same file; once only, in front of the
  // whole text, gave "world" no space after an added token).
  Json prefixed = tokenizerJson(Style::Gpt2);
  prefixed["pre_tokenizer"]["add_prefix_space"] = true;
  const hf::BpeTokenizer spaced(writeJson(dir.path, prefixed));
  CHECK(spaced.encode("hello world", false) == Ids{7, 12, 15, 16});
  CHECK(spaced.encode("hello<|endoftext|>world", false) == Ids{7, 12, kEndOfText, 15, 16});
  CHECK(spaced.encode("<|begin|>hello", false) == Ids{kBegin, 7, 12});
  CHECK(spaced.encode(" hello<|endoftext|> world", false) == Ids{7, 12, kEndOfText, 15, 16});
}

// Qwen2, Qwen3 and GPT-NeoX name the NFC normalizer: tokenizers composes
// "e" + U+0301 into "é" before splitting (ids as tokenizers 0.23 gives on
// this file). It applies between added tokens; bad UTF-8 is still refused.
TEST_CASE("the NFC normalizer composes the text before it is split") {
  TempDir dir;
  Json j = tokenizerJson(Style::Llama3);
  j["normalizer"] = {{"type", "NFC"}};
  const std::string path = writeJson(dir.path, j);
  requirePcre2(path);
  if (!hf::nfcAvailable()) SKIP("rcn_engine_hf was built without ICU: NFC is accepted but not applied");
  CHECK(hf::toNfc("e\xcc\x81") == "\xc3\xa9");
  CHECK(hf::toNfc("\xe2\x84\xab") == "\xc3\x85");  // the Angstrom sign is A with a ring
  CHECK(hf::toNfc("bad \xff") == "bad \xff");
  const hf::BpeTokenizer tok(path);
  CHECK(tok.encode("e\xcc\x81", false) == Ids{31});
  CHECK(tok.encode("e\xcc\x81<|endoftext|>hello e\xcc\x81", false) == Ids{31, kEndOfText, 12, 7, 31});
  CHECK(tok.encode("\xc3\xa9", false) == Ids{31});
  CHECK_THROWS_WITH(tok.encode("bad \xff text", false), ContainsSubstring("cannot encode the text"));
}

TEST_CASE("encode then decode gives the text back") {
  TempDir dir;
  // Every byte in the vocabulary, so any UTF-8 text can be encoded, plus the merges above.
  Json j = tokenizerJson(Style::Llama3);
  int next = int(kVocab.size()) + 2;
  for (int b = 0; b < 256; ++b)
    if (!j["model"]["vocab"].contains(hf::byteToUnicode(uint8_t(b)))) j["model"]["vocab"][hf::byteToUnicode(uint8_t(b))] = next++;
  const std::string path = writeJson(dir.path, j);
  requirePcre2(path);
  const hf::BpeTokenizer tok(path);
  for (const std::string text : {"hello world", "Grüße, 世界! 12345\n\ttabs  and  spaces ",
                                 "it's <|endoftext|> done", "emoji 🦀 and \x01 control", ""}) {
    INFO(text);
    const Ids ids = tok.encode(text, false);
    CHECK(tok.decode(ids, false) == text);
  }
}

TEST_CASE("malformed or unsupported tokenizer.json files are named") {
  TempDir dir;
  requirePcre2(writeJson(dir.path, tokenizerJson(Style::Llama3)));
  Json j = tokenizerJson(Style::Gpt2);
  j["model"]["merges"][0] = "h e x";
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("model.merges[0]"));
  j = tokenizerJson(Style::Llama3);
  j["model"]["type"] = "Unigram";
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("Unigram"));
  j = tokenizerJson(Style::Llama3);
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("Metaspace"));
  j = tokenizerJson(Style::Llama3);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(";
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("tokenizer.json: pre-tokenizer regex does not compile"));
  j = tokenizerJson(Style::Llama3);
  j["normalizer"] = {{"type", "Lowercase"}};
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("normalizer Lowercase"));
  j = tokenizerJson(Style::Llama3);
  j["model"]["ignore_merges"] = "yes";
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("unexpected structure"));
  CHECK_THAT(errorOf(dir.path + "/absent.json"), ContainsSubstring("cannot open"));
  std::ofstream(dir.path + "/bad.json") << "{\"model\": ";
  CHECK_THAT(errorOf(dir.path + "/bad.json"), ContainsSubstring("not valid JSON"));
  // What fuzzing found decoding or encoding silently wrong, or overflowing the stack:
  // template ids read unchecked (2^33 + 3 as 3, 3.7 as 3, true as 1),
  j = tokenizerJson(Style::Llama3);
  for (Json bad : {Json(8589934595ull), Json(3.7), Json(true), Json(-5), Json(1 << 22)}) {
    j["post_processor"]["processors"][1]["special_tokens"]["<|begin|>"]["ids"][0] = bad;
    CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("<|begin|>'s id is not a token id"));
  }
  // two vocabulary pieces of one id (which one it decodes to was arbitrary),
  j = tokenizerJson(Style::Llama3);
  j["model"]["vocab"]["hello!"] = 12;
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("gives id 12 to both"));
  // added_tokens that is no list (it was ignored),
  j = tokenizerJson(Style::Llama3);
  j["added_tokens"] = "x";
  CHECK_THAT(errorOf(writeJson(dir.path, j)), ContainsSubstring("added_tokens is not a list"));
  // and nesting a million deep (copies and messages recursed once a level).
  std::string deep = "{\"model\": {\"x\": ";
  for (int i = 0; i < 100000; ++i) deep += "[";
  std::ofstream(dir.path + "/deep.json") << deep;
  CHECK_THAT(errorOf(dir.path + "/deep.json"), ContainsSubstring("nested deeper than 128 levels"));
}

#ifdef RCN_ENGINE_BIN
namespace {

// Runs rcn_engine with `args`.
using rcn::test::EngineRun;
using rcn::test::runEngine;

}  // namespace

TEST_CASE("rcn_engine streams text from a Hugging Face directory with tokenizer.json", "[cli]") {
  TempDir dir;
  ModelConfig c;
  c.arch = "llama";
  c.dim = 32, c.hidden = 48, c.layers = 2, c.heads = 4, c.kvHeads = 2, c.headDim = 8;
  c.vocab = int(kVocab.size()) + 2, c.seqLen = 64, c.ropeInterleaved = false, c.tiedClassifier = false;
  const ModelWeights weights = randomWeights(c, 12);
  hftest::writeHfModel(dir.path, weights, {});
  // Begin and end of text as the tokenizer's special tokens.
  Json config;
  std::ifstream(dir.path + "/config.json") >> config;
  config["bos_token_id"] = kBegin;
  config["eos_token_id"] = kEndOfText;
  std::ofstream(dir.path + "/config.json") << config.dump(2);
  const std::string prompt = "hello world";
  const std::string model = " --device cpu --model " + dir.path + " --prompt '" + prompt + "' --steps 12";

#ifndef ENGINE_HF_HAVE_PCRE2
  writeJson(dir.path, tokenizerJson(Style::Llama3));
  const EngineRun run = runEngine(model);
  CHECK(run.status == 1);
  CHECK_THAT(run.err, ContainsSubstring("built without PCRE2"));
#else
  // A tokenizer that puts <|begin|> in front (Llama 3), and one that adds nothing (GPT-2, Qwen).
  for (Style style : {Style::Llama3, Style::Gpt2}) {
    const std::string tokenizerPath = writeJson(dir.path, tokenizerJson(style));
    // What the CLI must print: the prompt, then the greedy tokens' bytes up to <|endoftext|>.
    hf::BpeTokenizer tok(tokenizerPath);
    const Ids ids = tok.encode(prompt, true);
    const bool begins = ids.front() == kBegin;
    REQUIRE(begins == (style == Style::Llama3));
    CpuTpModel reference(weights, 1);
    std::string want = begins ? "" : tok.decodeToken(ids[0]);
    int generated = 0;
    int token = ids[0];
    for (int pos = 0; generated < 12; ++pos) {
      const std::vector<float>& logits = reference.forward(token, pos);
      const bool inPrompt = pos + 1 < int(ids.size());
      const int next = inPrompt ? ids[pos + 1] : argmax(logits.data(), c.vocab);
      if (!inPrompt && (++generated, next == kEndOfText)) break;
      want += tok.decodeToken(next);
      token = next;
    }
    REQUIRE(want.rfind(prompt, 0) == 0);
    INFO("expected: " << want);
    for (const std::string& extra : std::vector<std::string>{"", " --tp 2", " --tokenizer " + tokenizerPath}) {
      const EngineRun run = runEngine(model + extra);
      INFO("rcn_engine" << model << extra << "\n" << run.err);
      CHECK(run.status == 0);
      CHECK(run.out == want + "\n");
    }
  }
  std::ofstream(dir.path + "/other.json") << "{\"model\": {\"type\": \"WordPiece\"}}";
  const EngineRun bad = runEngine(model + " --tokenizer " + dir.path + "/other.json");
  CHECK(bad.status == 1);
  CHECK_THAT(bad.err, ContainsSubstring("other.json: model type WordPiece is not supported"));
#endif
  // Without tokenizer.json the prompt is config.json's BOS alone: one past the
  // vocabulary is named as config.json's.
  std::remove((dir.path + "/tokenizer.json").c_str());
  config["bos_token_id"] = 5000;
  std::ofstream(dir.path + "/config.json") << config.dump(2);
  const EngineRun noBos = runEngine(" --device cpu --model " + dir.path + " --steps 2");
  CHECK(noBos.status == 1);
  CHECK_THAT(noBos.err, ContainsSubstring("config.json: bos_token_id 5000 is outside the vocabulary"));
}
#endif
