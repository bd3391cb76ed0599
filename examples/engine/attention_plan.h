// How decode attention (attention.cu) divides its work: threads per block,
// the threads that share a key row, the rows a thread loads at once, and how
// many blocks (splits) share one head's context. Host code without CUDA, so
// that CI tests the choices.
#pragma once

#include <cstddef>

namespace engine {

constexpr int kAttentionThreads = 512;
constexpr int kAttentionMaxSplits = 16;
constexpr int kKeyRowsAhead = 4;    // key rows a thread loads before it multiplies any
constexpr int kValueRowsAhead = 4;  // value rows a thread loads before the scores

// Threads that share one key row: a power of two up to 32 that divides the
// row's 4-value groups (one thread per row when none does).
int keyRowThreads(int headDim);

// Value rows a block reads side by side: d / 4 threads a row, 4 values each.
inline int valueGroups(int headDim) { return kAttentionThreads / (headDim / 4); }

// The most positions one split takes (its scores live in shared memory).
inline int attentionChunk(int maxContext, int splits) { return (maxContext + splits - 1) / splits; }

// A block's shared memory: the scores of a chunk, then the value groups'
// partial sums, as floats.
inline size_t attentionSharedBytes(int chunk, int headDim) {
  return (size_t(chunk + 3) / 4 * 4 + size_t(valueGroups(headDim)) * headDim) * sizeof(float);
}

// How many splits a pass of `blocks` (tokens x heads) blocks uses over a
// context of maxContext positions: several while the blocks are fewer than
// the SMs (small-batch decode) and the context is long enough to pay for the
// merge, else one. Fixed when a decode step is captured; each token's
// positions are then spread evenly over the splits (attention.cu).
int attentionSplits(int maxContext, int blocks, int headDim);

}  // namespace engine
