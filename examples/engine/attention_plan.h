// SPDX-License-Identifier: BSD-3-Clause
// How decode attention (attention.cu) divides its work: threads per block,
// the threads that share a key row, the rows a thread loads at once, how
// many blocks (splits) share one head's context, and whether a block keeps
// its registers to itself or shares the SM with a second one. Host code
// without CUDA, so that CI tests the choices.
#pragma once

#include <cstddef>

#include "host_device.h"

namespace engine {

constexpr int kAttentionThreads = 512;
constexpr int kAttentionMaxHeadDim = 256;
// The splits of a head form one thread block cluster, whose portable size is at most 8.
constexpr int kAttentionMaxSplits = 8;
// The kernel's builds: 1 and 2 blocks an SM (attentionBlocksPerSm).
constexpr int kAttentionMaxBlocksPerSm = 2;
constexpr int kKeyRowsAhead = 4;    // key rows a thread loads before it multiplies any
constexpr int kValueRowsAhead = 4;  // value rows a thread loads before the scores

// Threads that share one key row: a power of two up to 32 that divides the
// row's 4-value groups (one thread per row when none does).
int keyRowThreads(int headDim);

// Value rows a block reads side by side: d / 4 threads a row, 4 values each.
ENGINE_HOST_DEVICE inline int valueGroups(int headDim) { return kAttentionThreads / (headDim / 4); }

// The most positions one split takes (its scores live in shared memory).
inline int attentionChunk(int maxContext, int splits) { return (maxContext + splits - 1) / splits; }

// A block's shared memory, in floats from its start: the scores of a chunk
// (rounded up to 4, so that the rest is 16-byte aligned for float4), the
// value groups' partial sums, then, in split passes only, the split's
// [max, sum, acc[d]] for the merge. The kernel and the host sizes both read it.
struct AttentionSharedLayout {
  int partial, mine, floats;
};
ENGINE_HOST_DEVICE inline AttentionSharedLayout attentionSharedLayout(int chunk, int headDim, int splits) {
  AttentionSharedLayout layout;
  layout.partial = (chunk + 3) / 4 * 4;
  layout.mine = layout.partial + valueGroups(headDim) * headDim;
  layout.floats = layout.mine + (splits > 1 ? 2 + headDim : 0);
  return layout;
}
inline size_t attentionSharedBytes(int chunk, int headDim, int splits) {
  return size_t(attentionSharedLayout(chunk, headDim, splits).floats) * sizeof(float);
}
// A block's shared memory in a pass of `splits` splits over a context of
// maxContext positions (the launch and the plan size it alike).
inline size_t attentionPassBytes(int maxContext, int headDim, int splits) {
  return attentionSharedBytes(attentionChunk(maxContext, splits), headDim, splits);
}

// How many splits a pass of `blocks` (tokens x heads) blocks uses over a
// context of maxContext positions on a GPU of `sms` multiprocessors: the
// count with the shortest estimated time, never splitting past two blocks
// an SM. Fixed when a decode step is captured; each token's positions are
// then spread evenly over the splits (attention.cu).
int attentionSplits(int maxContext, int blocks, int headDim, int sms);

// The most cache rows (key and value) one block of a pass asks L2 for before
// its wait: all of them while the pass's `parts` runs of rows (tokens x KV
// heads x splits, rowBytes a row) fit in half the L2; past that, the share
// that fits, and at least kAttentionMinPrefetchRows. A prefetch the L2
// cannot hold evicts rows before their loads come, and each of a KV head's
// query heads asks again. In decode each token is its own sequence, so the
// runs are distinct rows; a prefill pass's tokens share their sequence's
// rows, so it asks for the minimum there, which measured faster for long
// prompts and about the same for short ones (docs/log/engine-2026-12.md).
constexpr int kAttentionMinPrefetchRows = 64;
int attentionPrefetchRows(int parts, int rowBytes, size_t l2Bytes);

// The attention kernel build for a pass of `blocks` blocks of blockShared
// bytes of shared memory each: 2 blocks an SM (at most 64 registers a
// thread) when the blocks outnumber the SMs and two of them fit in an SM's
// sharedPerSm bytes (each with kAttentionSharedMargin more, for the kernel's
// own arrays and what the driver keeps per block), so that up to twice as
// many blocks as SMs run in one wave; else 1, whose registers make each
// block's chain of loads shorter.
constexpr size_t kAttentionSharedMargin = 2048;
inline int attentionBlocksPerSm(int blocks, int sms, size_t blockShared, size_t sharedPerSm) {
  return blocks > sms && 2 * (blockShared + kAttentionSharedMargin) <= sharedPerSm ? 2 : 1;
}

// The shared memory a context of maxContext positions needs in one block,
// the margin included: the unsplit (prefill) block over the whole context is
// the largest (a split block, half the scores or less plus d + 2 floats, is
// larger only in contexts of a few hundred positions, far below any limit).
inline size_t attentionLargestBlockBytes(int maxContext, int headDim) {
  return attentionPassBytes(maxContext, headDim, 1) + kAttentionSharedMargin;
}

}  // namespace engine
