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

int attentionSplits(int maxContext, int blocks, int headDim) {
  // Splitting only pays while one block per head leaves SMs idle: at batch 8
  // (128 blocks) it cost llama3-1b TP=2 1029 against 898 us a step and
  // llama3-8b TP=2 3384 against 3216 (H200, one call).
  if (blocks >= 128) return 1;
  // Otherwise the count with the shortest chain of memory latencies for a
  // full context: a block spends one on each round of key rows, one on every
  // 4 value rows of a thread past its first 4, and a split costs the merge,
  // about 3 (fitted on H200: at 236 positions llama3-1b, heads of 64, was
  // fastest unsplit, llama3-8b, heads of 128, with 4 splits of 1, 2 and 4;
  // at 1132, 5 splits beat 2 and 16). At most 256 blocks: the kernel's ~100
  // registers a thread leave room for one block per SM, and 16 splits (512
  // blocks, four waves) lost at 1132 positions.
  const int rowThreads = keyRowThreads(headDim);
  const int keysPerRound = kKeyRowsAhead * kAttentionThreads / rowThreads, groups = valueGroups(headDim);
  int best = 1, bestCost = INT_MAX;
  for (int splits = 1; splits <= kAttentionMaxSplits && blocks * splits <= 256; ++splits) {
    const int chunk = attentionChunk(maxContext, splits);
    const int valueRows = (chunk + groups - 1) / groups;
    const int cost = (chunk + keysPerRound - 1) / keysPerRound +
                     std::max(0, (valueRows + kValueRowsAhead - 1) / kValueRowsAhead - 1) + (splits > 1 ? 3 : 0);
    if (cost < bestCost) best = splits, bestCost = cost;
  }
  return best;
}

}  // namespace engine
