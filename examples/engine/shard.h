// SPDX-License-Identifier: BSD-3-Clause
// Tensor-parallel split of one model over `size` ranks (Megatron style):
// column-parallel Q/K/V and gate/up (each rank owns whole heads and a slice
// of the MLP), row-parallel O and down (each rank produces a partial sum of
// the full hidden vector, which an all-reduce completes). The embedding, the
// norms and the LM head are replicated. When there are more ranks than KV
// heads, each rank keeps the one KV head its query heads read (replicated).
#pragma once

#include "model.h"

namespace engine {

struct ShardLayout {
  int rank = 0, size = 1;
  int heads = 0, headStart = 0;      // this rank's query heads
  int kvHeads = 0, kvStart = 0;      // the KV heads they read
  int hidden = 0, hiddenStart = 0;   // this rank's slice of the MLP
  int group = 1;                     // query heads per KV head in the full model

  // The local KV head that local query head h reads.
  int kvHeadOf(int h) const { return (headStart + h) / group - kvStart; }
};

// Throws EngineError when the model does not split over `size` ranks.
ShardLayout planShard(const ModelConfig& config, int size, int rank);

// The weights rank `layout.rank` holds: only its rows of Q/K/V/gate/up and
// its columns of O/down; everything else copied whole.
ModelWeights shardWeights(const ModelWeights& full, const ShardLayout& layout);

}  // namespace engine
