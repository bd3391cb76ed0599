// SPDX-License-Identifier: BSD-3-Clause
#include "bpe_tokenizer.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <utility>

#include "bpe_merge.h"
#include "byte_unicode.h"
#include "json_util.h"
#include "model.h"
#include "unicode_nfc.h"

namespace engine::hf {

namespace {

std::string mergeKey(const std::string& left, const std::string& right) {
  std::string key = left;
  key += '\0';
  key += right;
  return key;
}

// The UTF-8 characters of `s`, each as its own string.
std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    while (i + len < s.size() && (uint8_t(s[i + len]) & 0xC0) == 0x80) ++len;
    out.emplace_back(s, i, len);
    i += len;
  }
  return out;
}

// A merge is "left right" (older files) or ["left", "right"] (newer ones).
std::pair<std::string, std::string> parseMerge(const Json& m, const std::string& what, size_t index) {
  const std::string where = what + ": model.merges[" + std::to_string(index) + "]";
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= s.size() ||
        s.find(' ', space + 1) != std::string::npos)
      throw EngineError(where + " \"" + s + "\" is not two tokens separated by one space");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  throw EngineError(where + " is neither \"a b\" nor [\"a\", \"b\"]");
}

// Ids index arrays as large as the largest (about 40 bytes an id): no real
// vocabulary comes near 2^22 (262144 is among the largest), so a larger id is
// a broken file, refused before it costs 170 MB or more.
constexpr long long kMaxTokenId = 1 << 22;

// Added tokens are markers a few dozen bytes long; each byte of one costs a
// node of the added-token trie (about 100 bytes), so a longer one is refused.
constexpr size_t kMaxAddedTokenBytes = 1024;

// v as a token id, or an error naming where it stands: an unchecked read
// would take 2^33 + 3 as 3, 3.7 as 3 and true as 1.
int checkedTokenId(const Json& v, const std::string& where) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<unsigned long long>() >= kMaxTokenId) ||
      v.get<long long>() < 0 || v.get<long long>() >= kMaxTokenId)
    throw EngineError(where + " is not a token id from 0 to " + std::to_string(kMaxTokenId - 1));
  return int(v.get<long long>());
}

// Ids of the special tokens a TemplateProcessing's "single" template puts
// before and after the text ($A).
void readTemplate(const Json& p, std::vector<int>& prefix, std::vector<int>& suffix, const std::string& what) {
  const Json& single = p.contains("single") ? p["single"] : Json();
  const Json& specials = p.contains("special_tokens") ? p["special_tokens"] : Json::object();
  if (!single.is_array()) throw EngineError(what + ": post_processor template has no \"single\" list");
  bool seenText = false;
  for (const Json& item : single) {
    if (item.contains("Sequence")) {
      seenText = true;
      continue;
    }
    if (!item.contains("SpecialToken")) throw EngineError(what + ": post_processor template item " + item.dump() + " is not understood");
    const std::string name = requireString(item["SpecialToken"], "id", what + ": post_processor");
    if (!specials.contains(name) || !specials[name].contains("ids") || !specials[name]["ids"].is_array())
      throw EngineError(what + ": post_processor special token " + name + " has no ids");
    for (const Json& id : specials[name]["ids"])
      (seenText ? suffix : prefix).push_back(checkedTokenId(id, what + ": post_processor special token " + name + "'s id"));
  }
}

void readPostProcessor(const Json& p, std::vector<int>& prefix, std::vector<int>& suffix, const std::string& what) {
  if (p.is_null()) return;
  const std::string type = requireString(p, "type", what + ": post_processor");
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "TemplateProcessing") return readTemplate(p, prefix, suffix, what);
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const Json& sub : p["processors"]) readPostProcessor(sub, prefix, suffix, what);
    return;
  }
  throw EngineError(what + ": post_processor type " + type + " is not supported");
}

}  // namespace

// A field of an unexpected JSON type surfaces from nlohmann-json as its own
// exception; the function-try-block turns it into an EngineError naming the file.
BpeTokenizer::BpeTokenizer(const std::string& path) try : path_(path) {
  const Json j = readJsonFile(path);
  const std::string what = path;
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw EngineError(what + ": no \"model\" object (not a tokenizer.json?)");

  // model: the vocabulary and merges.
  const Json& model = j["model"];
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") throw EngineError(what + ": model type " + type + " is not supported (BPE is)");
  if (!model.contains("vocab") || !model["vocab"].is_object()) throw EngineError(what + ": model.vocab is missing");
  std::vector<bool> taken;  // ids the vocabulary gave out so far
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const int id = checkedTokenId(*it, what + ": model.vocab[" + it.key() + "]");
    if (id >= int(pieces_.size())) pieces_.resize(id + 1), taken.resize(id + 1);
    // Two pieces of one id: which one the id decodes to would be arbitrary.
    if (taken[id])
      throw EngineError(what + ": model.vocab gives id " + std::to_string(id) + " to both \"" + pieces_[id] +
                        "\" and \"" + it.key() + "\"");
    taken[id] = true;
    pieces_[id] = it.key();
    ids_[it.key()] = id;
  }
  const Json& merges = model.contains("merges") ? model["merges"] : Json::array();
  if (!merges.is_array()) throw EngineError(what + ": model.merges is not a list");
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto [left, right] = parseMerge(merges[i], what, i);
    ranks_.emplace(mergeKey(left, right), int(i));  // the first listing of a pair wins
  }
  ignoreMerges_ = model.value("ignore_merges", false);

  // added_tokens: matched verbatim before anything else, the longest that
  // starts at a position first.
  const Json& addedTokens = j.contains("added_tokens") ? j["added_tokens"] : Json();
  if (!addedTokens.is_null() && !addedTokens.is_array()) throw EngineError(what + ": added_tokens is not a list");
  if (addedTokens.is_array()) {
    for (const Json& t : addedTokens) {
      AddedToken a;
      a.content = requireString(t, "content", what + ": added_tokens");
      a.id = requireInt(t, "id", what + ": added_tokens");
      a.special = t.value("special", false);
      if (a.content.empty() || a.content.size() > kMaxAddedTokenBytes || a.id < 0 || a.id >= kMaxTokenId)
        throw EngineError(what + ": added token " + t.dump().substr(0, 200) + " is invalid (an id from 0 to " +
                          std::to_string(kMaxTokenId - 1) + " and 1 to " + std::to_string(kMaxAddedTokenBytes) +
                          " bytes of content)");
      if (a.id >= int(pieces_.size())) pieces_.resize(a.id + 1);
      pieces_[a.id] = a.content;
      ids_[a.content] = a.id;
      added_.push_back(a);
    }
  }
  special_.assign(pieces_.size(), false);
  addedId_.assign(pieces_.size(), false);
  for (size_t k = 0; k < added_.size(); ++k) {
    const AddedToken& a = added_[k];
    special_[a.id] = a.special, addedId_[a.id] = true;
    addedTrie_.add(a.content, int(k));
  }

  // normalizer: none, or NFC (applied where ICU is built in; without it the
  // input is taken to be NFC already, as almost all text is).
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const std::string n = requireString(j["normalizer"], "type", what + ": normalizer");
    if (n != "NFC") throw EngineError(what + ": normalizer " + n + " is not supported");
    nfc_ = true;
  }

  // pre_tokenizer: Split(Regex) steps and a ByteLevel step, alone or in a Sequence.
  const Json pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json();
  std::vector<Json> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers"))
    for (const Json& s : pre["pretokenizers"]) steps.push_back(s);
  else if (pre.is_object())
    steps.push_back(pre);
  bool byteLevel = false;
  for (const Json& s : steps) {
    const std::string t = requireString(s, "type", what + ": pre_tokenizer");
    if (t == "ByteLevel") {
      byteLevel = true;
      addPrefixSpace_ = s.value("add_prefix_space", false);
      prefixSpaceStep_ = splitters_.size();
      if (s.value("use_regex", true)) splitters_.emplace_back(kGpt2SplitPattern, what);
    } else if (t == "Split") {
      const Json& pattern = s.contains("pattern") ? s["pattern"] : Json();
      if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
        throw EngineError(what + ": pre_tokenizer Split needs a {\"Regex\": ...} pattern");
      const std::string behavior = s.value("behavior", std::string("Isolated"));
      if (behavior != "Isolated" || s.value("invert", false))
        throw EngineError(what + ": pre_tokenizer Split behavior " + behavior + " is not supported (Isolated is)");
      splitters_.emplace_back(pattern["Regex"].get<std::string>(), what);
    } else {
      throw EngineError(what + ": pre_tokenizer " + t + " is not supported");
    }
  }
  if (!byteLevel) throw EngineError(what + ": no ByteLevel pre-tokenizer; only byte-level BPE is supported");

  readPostProcessor(j.contains("post_processor") ? j["post_processor"] : Json(), prefix_, suffix_, what);
} catch (const Json::exception& e) {
  throw EngineError(path + ": unexpected structure (" + e.what() + ")");
}

int BpeTokenizer::tokenId(const std::string& content) const {
  auto it = ids_.find(content);
  return it == ids_.end() ? -1 : it->second;
}

int BpeTokenizer::mergeRank(const std::string& left, const std::string& right) const {
  auto it = ranks_.find(mergeKey(left, right));
  return it == ranks_.end() ? INT_MAX : it->second;
}

// BPE on one pre-tokenized piece: spell its bytes in the alphabet, then merge
// the adjacent pair of lowest rank (leftmost on ties) until none is listed.
void BpeTokenizer::encodePiece(const std::string& piece, std::vector<int>& out) const {
  std::string spelled;
  for (unsigned char b : piece) spelled += byteToUnicode(b);
  if (ignoreMerges_) {
    const int id = tokenId(spelled);
    if (id >= 0) return out.push_back(id);
  }
  const std::vector<std::string> symbols =
      mergePairs(characters(spelled),
                 [&](const std::string& left, const std::string& right) -> std::optional<std::pair<int, std::string>> {
                   const int rank = mergeRank(left, right);
                   if (rank == INT_MAX) return std::nullopt;
                   return std::make_pair(rank, left + right);
                 });
  for (const std::string& s : symbols) {
    const int id = tokenId(s);
    if (id < 0) throw EngineError(path_ + ": the vocabulary has no token for \"" + s + "\"");
    out.push_back(id);
  }
}

void BpeTokenizer::encodeText(const std::string& text, std::vector<int>& out) const {
  std::vector<std::string> pieces{nfc_ ? toNfc(text) : text};
  for (size_t step = 0; step <= splitters_.size(); ++step) {
    // ByteLevel's add_prefix_space puts a space in front of every piece it
    // sees that lacks one, as tokenizers does: each text between added
    // tokens, and each piece of a Split that ran before it.
    if (addPrefixSpace_ && step == prefixSpaceStep_)
      for (std::string& p : pieces)
        if (p[0] != ' ') p.insert(p.begin(), ' ');
    if (step == splitters_.size()) break;
    std::vector<std::string> finer;
    for (const std::string& p : pieces)
      for (std::string& q : splitters_[step].split(p)) finer.push_back(std::move(q));
    pieces.swap(finer);
  }
  for (const std::string& p : pieces) encodePiece(p, out);
}

std::vector<int> BpeTokenizer::encode(const std::string& text, bool addSpecial) const {
  std::vector<int> out;
  if (addSpecial) out = prefix_;
  // Cut the added tokens out first; the text between them is encoded normally.
  std::string pending;
  for (size_t i = 0; i < text.size();) {
    const int found = addedTrie_.longestAt(text, i);
    const AddedToken* hit = found < 0 ? nullptr : &added_[size_t(found)];
    if (!hit) {
      pending += text[i++];
      continue;
    }
    if (!pending.empty()) encodeText(pending, out);
    pending.clear();
    out.push_back(hit->id);
    i += hit->content.size();
  }
  if (!pending.empty()) encodeText(pending, out);
  if (addSpecial) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

std::string BpeTokenizer::decodeToken(int token) const {
  if (token < 0 || token >= int(pieces_.size()))
    throw EngineError("token id " + std::to_string(token) + " is outside the tokenizer's " +
                      std::to_string(pieces_.size()) + " tokens");
  if (addedId_[token]) return pieces_[token];
  std::string bytes;
  unicodeToBytes(pieces_[token], bytes);
  return bytes;
}

std::string BpeTokenizer::decode(const std::vector<int>& tokens, bool skipSpecial) const {
  std::string text;
  for (int t : tokens) {
    if (skipSpecial && t >= 0 && t < int(special_.size()) && special_[t]) continue;
    text += decodeToken(t);
  }
  return text;
}

}  // namespace engine::hf
