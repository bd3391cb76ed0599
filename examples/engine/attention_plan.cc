// SPDX-License-Identifier: BSD-3-Clause
// The work plan of decode attention (attention_plan.h).
#include "attention_plan.h"

#include <algorithm>
#include <climits>

namespace engine {

int keyRowThreads(int headDim) {
  const int groups = headDim / 4;
  for (int threads = 32; threads > 1; threads /= 2)
    if (groups % threads == 0) return threads;
  return 1;
}

int attentionPrefetchRows(int parts, int rowBytes, size_t l2Bytes) {
  const size_t perRow = size_t(parts) * 2 * rowBytes;  // a key and a value row per run
  const size_t rows = perRow ? l2Bytes / 2 / perRow : 0;
  return int(std::max<size_t>(kAttentionMinPrefetchRows, std::min<size_t>(rows, INT_MAX)));
}

// The estimate counts memory latencies on a block's chain: one for each
// round of key rows, one for every 4 value rows of a thread past its first
// 4, and, when split, about 3 for the merge across the cluster. A pass that
// takes more than half of the SMs costs about 3 more: the next kernel (the
// O product) can then start few of its blocks, whose first weight loads
// otherwise overlap attention; one with more blocks than SMs about 2 more,
// as its blocks share SMs with 64 registers a thread. Splitting never goes
// past two blocks per SM (one wave). Fitted on H200 (132 SMs, 2026-11-30, us a decode step): at
// 236 positions llama3-8b TP=1 batch 1 (32 blocks) took 4150 / 4123 / 4290
// unsplit / 2 / 4 splits, TP=2 (16 blocks) 2572 / 2539 / 2520, TP=2 batch 8
// (128 blocks) 3144 unsplit and 3189 with 2 splits; llama3-1b (heads of 64,
// 16-32 blocks) was fastest unsplit; at 1132 positions llama3-8b TP=1 batch
// 1 took 5322 / 4425 / 4287 / 4587 with 1 / 4 / 6 / 8 splits.
int attentionSplits(int maxContext, int blocks, int headDim, int sms) {
  const int rowThreads = keyRowThreads(headDim);
  const int keysPerRound = kKeyRowsAhead * kAttentionThreads / rowThreads, groups = valueGroups(headDim);
  int best = 1, bestCost = INT_MAX;
  for (int splits = 1; splits <= kAttentionMaxSplits && (splits == 1 || blocks * splits <= 2 * sms); ++splits) {
    const int chunk = attentionChunk(maxContext, splits);
    const int valueRows = (chunk + groups - 1) / groups;
    const int cost = (chunk + keysPerRound - 1) / keysPerRound +
                     std::max(0, (valueRows + kValueRowsAhead - 1) / kValueRowsAhead - 1) + (splits > 1 ? 3 : 0) +
                     (2 * blocks * splits > sms ? 3 : 0) + (blocks * splits > sms ? 2 : 0);
    if (cost < bestCost) best = splits, bestCost = cost;
  }
  return best;
}

}  // namespace engine
