// SPDX-License-Identifier: BSD-3-Clause
// The merge loop both tokenizers share (llama2.c's scores, Hugging Face's
// ranks): merge the adjacent pair that ranks best, the leftmost of equals,
// until no pair ranks at all. The plain loop rescans the sequence after each
// merge, O(n^2): a prompt of 100 KB took minutes. Here every pair waits in a
// heap ordered by (rank, position of its left symbol); a merge retires the
// pairs it touched and queues the two it makes, so a prompt of n symbols takes
// O(n log n) and gives the plain loop's tokens exactly (positions keep their
// order: a merged symbol keeps its left one's).
#pragma once

#include <functional>
#include <optional>
#include <queue>
#include <type_traits>
#include <utility>
#include <vector>

namespace engine {

// rankOf(left, right): std::optional<std::pair<Rank, Symbol>>, the pair's
// rank (lower merges first) and the merged symbol, or nothing when the pair
// does not merge.
template <typename Symbol, typename RankOf>
std::vector<Symbol> mergePairs(std::vector<Symbol> symbols, RankOf rankOf) {
  using Rank = typename std::invoke_result_t<RankOf&, const Symbol&, const Symbol&>::value_type::first_type;
  struct Node {
    int prev, next;
    unsigned version;  // bumped when the symbol changes or the node is merged away
  };
  struct Pair {
    Rank rank;
    int left, right;
    unsigned leftVersion, rightVersion;
    bool operator>(const Pair& o) const { return rank != o.rank ? o.rank < rank : left > o.left; }
  };
  const int n = int(symbols.size());
  std::vector<Node> nodes(n);
  for (int i = 0; i < n; ++i) nodes[i] = {i - 1, i + 1 < n ? i + 1 : -1, 0};
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> heap;
  auto queuePair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    if (auto r = rankOf(symbols[left], symbols[right]))
      heap.push({r->first, left, right, nodes[left].version, nodes[right].version});
  };
  for (int i = 0; i + 1 < n; ++i) queuePair(i, i + 1);
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    Node& left = nodes[p.left];
    Node& right = nodes[p.right];
    if (left.version != p.leftVersion || right.version != p.rightVersion || left.next != p.right) continue;
    symbols[p.left] = rankOf(symbols[p.left], symbols[p.right])->second;
    ++left.version, ++right.version;
    left.next = right.next;
    if (right.next >= 0) nodes[right.next].prev = p.left;
    queuePair(left.prev, p.left);
    queuePair(p.left, left.next);
  }
  std::vector<Symbol> merged;
  for (int i = n > 0 ? 0 : -1; i >= 0; i = nodes[i].next) merged.push_back(std::move(symbols[i]));
  return merged;
}

}  // namespace engine
