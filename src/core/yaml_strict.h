// SPDX-License-Identifier: BSD-3-Clause
// What YAML takes without a word, for the readers that refuse it (policy and
// topology files): a key given twice in one mapping, of which yaml-cpp keeps
// one, and a document after the first, which a single-document load drops;
// and yaml-cpp's multi-document load, which can loop for ever.
// Include only where ROCENANTE_HAVE_YAML is defined.
#pragma once

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>
#include <string>

namespace rcn {

// The second occurrence of a scalar key that `map` gives twice, or a null node.
inline YAML::Node repeatedKey(const YAML::Node& map) {
  std::set<std::string> seen;
  for (const auto& item : map)
    if (item.first.IsScalar() && !seen.insert(item.first.Scalar()).second) return item.first;
  return YAML::Node();
}

// A file's first YAML document, and whether another that says something
// follows (an empty one, as after a final `---`, does not).
struct YamlDocuments {
  YAML::Node first;
  size_t extra = 0;   // the index of that later document; 0: none
  int extraLine = 0;  // the line its content starts on (1-based)
};

// Sees only each document's root: whether it is null, and where it starts.
class DocumentRoots : public YAML::EventHandler {
 public:
  bool empty = true;
  YAML::Mark mark;

  void OnDocumentStart(const YAML::Mark& m) override {
    seen_ = false;
    empty = true;
    mark = m;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { root(m, true); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { root(m, false); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override {
    root(m, false);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    root(m, false);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    root(m, false);
  }
  void OnMapEnd() override {}

 private:
  void root(const YAML::Mark& m, bool null) {
    if (seen_) return;
    seen_ = true;
    empty = null;
    mark = m;
  }
  bool seen_ = false;
};

// Not YAML::LoadAll: yaml-cpp 0.7's loops for ever, allocating a null
// document a turn, on text such as a lone "," (a document that takes no
// token is handed out again: upstream issue 1040, fixed after 0.8). The
// documents are walked here; one whose root starts where the one before it
// started took no token, and that text is refused as not YAML. Throws
// YAML::ParserException on text that is not YAML.
inline YamlDocuments loadYamlDocuments(const std::string& text) {
  YamlDocuments out;
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentRoots roots;
  int previousStart = -1;
  for (size_t d = 0; parser.HandleNextDocument(roots); ++d) {
    if (roots.mark.pos == previousStart)
      throw YAML::ParserException(roots.mark, "a token that starts no node (yaml-cpp would repeat it for ever)");
    previousStart = roots.mark.pos;
    if (d > 0 && !roots.empty && out.extra == 0) {
      out.extra = d;
      out.extraLine = roots.mark.line + 1;
    }
  }
  out.first = YAML::Load(text);
  return out;
}

}  // namespace rcn
