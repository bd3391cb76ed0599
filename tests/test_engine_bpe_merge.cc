// SPDX-License-Identifier: BSD-3-Clause
// The tokenizers' shared merge loop (bpe_merge.h) against the plain one it
// replaced: the same tokens on random sequences and merge tables, ties
// included, and a long prompt in a bounded time (ctest's timeout).
#include <catch2/catch_test_macros.hpp>

#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "bpe_merge.h"

namespace {

using Table = std::map<std::pair<int, int>, std::pair<int, int>>;  // (left, right) -> (rank, merged)

std::optional<std::pair<int, int>> rankIn(const Table& table, int left, int right) {
  auto it = table.find({left, right});
  if (it == table.end()) return std::nullopt;
  return it->second;
}

// The loop the tokenizers had: rescan, merge the best pair (leftmost of equals), repeat.
std::vector<int> plainMerge(std::vector<int> symbols, const Table& table) {
  for (;;) {
    std::optional<std::pair<int, int>> best;
    size_t at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto r = rankIn(table, symbols[i], symbols[i + 1]);
      if (r && (!best || r->first < best->first)) best = r, at = i;
    }
    if (!best) return symbols;
    symbols[at] = best->second;
    symbols.erase(symbols.begin() + at + 1);
  }
}

}  // namespace

TEST_CASE("the heap merge gives the plain merge's tokens", "[engine]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    // Symbols 0..5 to start; merges make symbols 6.. and share a few ranks, so ties happen.
    Table table;
    const int merges = 4 + int(rng() % 20);
    for (int m = 0; m < merges; ++m)
      table.emplace(std::make_pair(int(rng() % (6 + m)), int(rng() % (6 + m))),
                    std::make_pair(int(rng() % 8), 6 + m));
    std::vector<int> symbols(rng() % 40);
    for (int& s : symbols) s = int(rng() % 6);
    const auto rankOf = [&](int l, int r) { return rankIn(table, l, r); };
    INFO("trial " << trial);
    CHECK(engine::mergePairs(symbols, rankOf) == plainMerge(symbols, table));
  }
}

TEST_CASE("the heap merge takes a long prompt in stride", "[engine]") {
  // 2^17 symbols that merge pairwise, level after level, down to one (the plain loop: minutes).
  Table table;
  for (int level = 0; level < 17; ++level) table.emplace(std::make_pair(level, level), std::make_pair(level, level + 1));
  std::vector<int> symbols(1 << 17, 0);
  const auto merged = engine::mergePairs(symbols, [&](int l, int r) { return rankIn(table, l, r); });
  CHECK(merged == std::vector<int>{17});
}
