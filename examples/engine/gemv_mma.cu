// SPDX-License-Identifier: BSD-3-Clause
// Matrix products for 3-8 tokens (gemv.h) on tensor cores: a warp multiplies
// 16 weight rows by the tokens' inputs with mma.sync m16n8k16 (bf16 in, fp32
// accumulation), the mma's 8 columns being the tokens (the columns past the
// last token compute values nobody writes).
//
// Rows: mma rows g and g + 8 hold the two rows of output g for the paired
// epilogues (SwiGLU: gate and up row; QKV: the two rows one RoPE rotation
// mixes, or two v rows; rowsOf), or outputs g and g + 8 for Plain. The
// accumulators of lane 4g + t are rows g and g + 8 for tokens 2t and 2t + 1,
// so each lane runs the epilogue of its own outputs, no shuffles.
//
// K: a dot product does not depend on the order of its terms, so the weights
// are used as they lie in memory. Lane (g, t) loads 16 bytes (8 values) of
// each of its two rows at k + 8t: values 0-3 feed one mma, 4-7 another; its B
// fragment is the same 8 positions of token g's input, one 16-byte load.
// The mma's k order is a permutation of memory's, the same for A and B.
//
// Input: plain bf16 rows (a normed input has its norm run as a kernel of its
// own in front: gemvFits), read by each lane from global memory, its B
// fragments loaded with the chunk's weights (the whole input is at most a
// few hundred KB, so after the first block's reads it comes from L2).
//
// Work: one block of 16 warps per SM; each block takes a contiguous run of
// 16-row tiles. When a block has fewer tiles than warps, `splits` warps share
// a tile, each a slice of its K, and add their partial sums through shared
// memory at the end of each round of tiles. Weights stream as in the CUDA-core kernel: each lane keeps a chunk
// of 8 16-byte loads in flight and loads the next chunk (of the same tile or
// the next round's) before it multiplies the current one; the first chunk is
// loaded before waiting for the previous kernel.
#include <algorithm>
#include <climits>

#include "gemv_common.cuh"

namespace engine {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kSteps = 4;                  // 32-value k steps per chunk (two mma each)
constexpr int kChunkVectors = 4 * kSteps;  // 16-byte vectors of a row per chunk
// Partial sums of split tiles: two rounds (one barrier per round) of every
// warp's accumulators, [round % 2][warp][4][32] floats.
constexpr size_t kPartialBytes = 2 * kWarps * 4 * 32 * sizeof(float);

// d += A B for one m16n8k16 tile, A and B as the PTX ISA lays out their
// fragments ("Matrix Fragments for mma.m16n8k16 with floating point type"):
// a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9],
// a3 = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g];
// d = {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]} (lane 4g + t).
__device__ inline void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                           uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The weight rows behind mma rows g and g + 8 of a tile; -1 past the last output.
template <Epilogue kEpilogue>
__device__ void tileRows(const GemvParams& p, int tile, int g, int (&rows)[2]) {
  if constexpr (kEpilogue == Epilogue::Plain) {
    const int j = tile * 16 + g;
    rows[0] = j < p.out ? j : -1;
    rows[1] = j + 8 < p.out ? j + 8 : -1;
  } else {
    const int j = tile * 8 + g;
    rows[0] = rows[1] = -1;
    if (j < p.out) rowsOf<kEpilogue>(p, j, rows);
  }
}

// This lane's share of one chunk of a tile: kSteps 16-byte vectors of each
// of its two rows, vector chunk * kChunkVectors + 4s + t for step s, and the
// same vectors of token g's input.
struct Chunk {
  uint4 w[2][kSteps];
  uint4 b[kSteps];

  __device__ void load(const GemvParams& p, const int (&rows)[2], int chunk, int t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint4* row = p.w + size_t(max(rows[r], 0)) * p.vectors;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int v = chunk * kChunkVectors + 4 * s + t;
        w[r][s] = rows[r] >= 0 && v < p.vectors ? __ldcs(row + v) : make_uint4(0, 0, 0, 0);
      }
    }
  }

  // Token g's input row x, at this chunk's vectors.
  __device__ void loadInput(const uint4* x, int chunk, int t, int vectors) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int v = chunk * kChunkVectors + 4 * s + t;
      b[s] = v < vectors ? x[v] : make_uint4(0, 0, 0, 0);
    }
  }

  // acc += the chunk's rows times the same positions of token g's input.
  // Past the end of a row both operands are zeros.
  __device__ void multiply(float (&acc)[4], int chunk, int vectors) const {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      if (chunk * kChunkVectors + 4 * s >= vectors) break;  // the same for the whole warp
      mma(acc, w[0][s].x, w[1][s].x, w[0][s].y, w[1][s].y, b[s].x, b[s].y);
      mma(acc, w[0][s].z, w[1][s].z, w[0][s].w, w[1][s].w, b[s].z, b[s].w);
    }
  }
};

// The epilogue of this lane's outputs of a tile from its accumulators
// acc = {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}: tokens 2t and 2t + 1
// of output g (Plain: of outputs g and g + 8).
template <Epilogue kEpilogue, typename OutT>
__device__ void finishTile(const GemvParams& p, int tile, int g, int t, const float (&acc)[4], const QkvShared& q) {
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int b = 2 * t + u;
    if (b >= p.tokens) break;
    if constexpr (kEpilogue == Epilogue::Plain) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int j = tile * 16 + g + 8 * h;
        const int rows[1] = {j};
        if (j < p.out) finish<kEpilogue, OutT>(p, j, b, rows, &acc[2 * h + u], q);
      }
    } else {
      const int j = tile * 8 + g;
      if (j >= p.out) break;
      int rows[2];
      rowsOf<kEpilogue>(p, j, rows);
      const float sum[2] = {acc[u], acc[2 + u]};
      finish<kEpilogue, OutT>(p, j, b, rows, sum, q);
    }
  }
}

template <Epilogue kEpilogue, typename OutT>
__global__ void __launch_bounds__(kThreads, 1) gemvMmaKernel(GemvParams p) {
  extern __shared__ float partials[];  // of split tiles
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // This block's tiles [firstTile, endTile), `slots` at a time (a round):
  // this warp takes the tile of its slot in each round, and of it the chunks
  // [firstChunk, firstChunk + chunks) (its split's slice of K).
  const int firstTile = int(int64_t(blockIdx.x) * p.tiles / gridDim.x);
  const int endTile = int(int64_t(blockIdx.x + 1) * p.tiles / gridDim.x);
  const int slots = kWarps / p.splits, slot = warp / p.splits, split = warp % p.splits;
  const int rounds = (endTile - firstTile + slots - 1) / slots;
  const int chunksPerRow = (p.vectors + kChunkVectors - 1) / kChunkVectors;
  const int perSplit = (chunksPerRow + p.splits - 1) / p.splits;
  const int firstChunk = min(chunksPerRow, split * perSplit);
  const int chunks = min(chunksPerRow, firstChunk + perSplit) - firstChunk;

  // Chunk c of this warp's tile in round r; zeros, and no loads, where the
  // round has no tile for this slot. The rows are found again for every
  // chunk: keeping a round's rows (and the next round's) in registers across
  // the chunk loop made batch-8 decode 4 % slower on H200 (llama3-8b TP=1
  // 5196 against 4988 us a step, llama3-1b 1152 against 1113).
  // The input is the previous kernel's output: read after the wait.
  auto load = [&](Chunk& into, int r, int c, const uint4* x) {
    const int tile = firstTile + slot + r * slots;
    int rows[2] = {-1, -1};
    if (tile < endTile) tileRows<kEpilogue>(p, tile, g, rows);
    into.load(p, rows, firstChunk + c, t);
    if (x) into.loadInput(x, firstChunk + c, t, p.vectors);
  };

  Chunk current;
  if (rounds > 0 && chunks > 0) load(current, 0, 0, nullptr);
  __shared__ QkvShared qkv;  // the QKV epilogue's only
  stageRopeFreqs<kEpilogue>(p, qkv);
  waitForPrevious();
  // The tokens before the input loads: the other order made batch-8 decode
  // 0.3 % slower (H200, llama3-8b TP=1 4371 -> 4382 us a step).
  storeQkvTokens<kEpilogue>(p, loadQkvToken<kEpilogue>(p), qkv);
  const int column = min(g, p.tokens - 1);  // column g of B: token g (any token past the last)
  const uint4* x = static_cast<const uint4*>(p.input.x) + size_t(column) * p.vectors;
  if (rounds > 0 && chunks > 0) current.loadInput(x, firstChunk, t, p.vectors);

  for (int r = 0; r < rounds; ++r) {
    float acc[4] = {};
    for (int c = 0; c < chunks; ++c) {
      Chunk next;
      if (c + 1 < chunks) {
        load(next, r, c + 1, x);
      } else if (r + 1 < rounds) {
        load(next, r + 1, 0, x);
      }
      current.multiply(acc, firstChunk + c, p.vectors);
      current = next;
    }
    const int tile = firstTile + slot + r * slots;
    if (p.splits == 1) {
      if (tile < endTile) finishTile<kEpilogue, OutT>(p, tile, g, t, acc, qkv);
      continue;
    }
    // The first warp of the slot adds the slot's partial sums in split order.
    float* mine = partials + ((r % 2) * kWarps + warp) * 128;
#pragma unroll
    for (int e = 0; e < 4; ++e) mine[e * 32 + lane] = acc[e];
    __syncthreads();  // every warp runs every round
    if (split == 0 && tile < endTile) {
      float sum[4] = {};
      for (int k = 0; k < p.splits; ++k) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[e] += mine[k * 128 + e * 32 + lane];
      }
      finishTile<kEpilogue, OutT>(p, tile, g, t, sum, qkv);
    }
  }
}

// The warps that share a tile: the fewest that give the shortest chain of
// chunks per warp (rounds x chunks of a split) for a block of `tiles` tiles
// and rows of `chunks` chunks.
int splitsFor(int tiles, int chunks) {
  int best = 1, bestChain = INT_MAX;
  for (int splits = 1; splits <= kWarps && splits <= chunks; splits *= 2) {
    const int slots = kWarps / splits;
    const int chain = (tiles + slots - 1) / slots * ((chunks + splits - 1) / splits);
    if (chain < bestChain) best = splits, bestChain = chain;
  }
  return best;
}

}  // namespace

// One block per SM (as many as fit), each with a contiguous, even share of
// the tiles. A normed input is refused (its norm runs in front: gemvFits).
template <Epilogue kEpilogue, typename OutT>
cudaError_t launchGemvMma(GemvParams p, Launch on) {
  if (p.input.normed()) return cudaErrorInvalidValue;
  constexpr auto kernel = gemvMmaKernel<kEpilogue, OutT>;
  int blocks = 0;
  cudaError_t e = gemvBlocksFor<kernel>(kThreads, kPartialBytes, &blocks);
  if (e != cudaSuccess) return e;
  const int outputsPerTile = kEpilogue == Epilogue::Plain ? 16 : 8;
  p.tiles = (p.out + outputsPerTile - 1) / outputsPerTile;
  const int grid = std::max(1, std::min(p.tiles, blocks));
  p.splits = splitsFor((p.tiles + grid - 1) / grid, (p.vectors + kChunkVectors - 1) / kChunkVectors);
  return launch(kernel, dim3(grid), dim3(kThreads), kPartialBytes, on, p);
}

template cudaError_t launchGemvMma<Epilogue::Plain, float>(GemvParams, Launch);
template cudaError_t launchGemvMma<Epilogue::Plain, __nv_bfloat16>(GemvParams, Launch);
template cudaError_t launchGemvMma<Epilogue::SwiGlu, __nv_bfloat16>(GemvParams, Launch);
template cudaError_t launchGemvMma<Epilogue::Qkv, __nv_bfloat16>(GemvParams, Launch);

}  // namespace engine
