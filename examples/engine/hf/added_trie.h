// SPDX-License-Identifier: BSD-3-Clause
// The added tokens of a tokenizer.json as a byte trie, so that finding the
// longest one that starts at a position of the text costs at most the
// longest token's length, however many there are (Llama 3 has 256, 250 of
// them sharing the 25-byte prefix "<|reserved_special_token_").
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace engine::hf {

class AddedTrie {
 public:
  // Adds `content` as entry `index`; content added twice keeps its first.
  void add(const std::string& content, int index) {
    int node = 0;
    for (unsigned char c : content) {
      auto found = nodes_[node].next.find(c);
      if (found == nodes_[node].next.end()) {
        found = nodes_[node].next.emplace(c, int(nodes_.size())).first;
        nodes_.emplace_back();
      }
      node = found->second;
    }
    if (nodes_[node].index < 0) nodes_[node].index = index;
  }

  // The entry of the longest content that starts at text[at], or -1.
  int longestAt(const std::string& text, size_t at) const {
    int node = 0, longest = -1;
    for (size_t i = at; i < text.size(); ++i) {
      const auto found = nodes_[node].next.find(static_cast<unsigned char>(text[i]));
      if (found == nodes_[node].next.end()) break;
      node = found->second;
      if (nodes_[node].index >= 0) longest = nodes_[node].index;
    }
    return longest;
  }

 private:
  struct Node {
    std::map<unsigned char, int> next;  // byte -> child node
    int index = -1;                     // the entry whose content ends here
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);  // node 0 is the root
};

}  // namespace engine::hf
