// SPDX-License-Identifier: BSD-3-Clause
// Matrix-vector products for decode (gemv.h): the entry points, and the
// CUDA-core kernel for 1-2 tokens (3-8 tokens run on tensor cores,
// gemv_mma.cu). A block stages a normed input (the fused norm) in shared
// memory, a plain one each lane reads beside its weights; each warp streams
// whole rows of W (or, for some normed products, halves of them along K,
// which the block adds at the end): its rows' 16-byte chunks form one
// sequence, and the next chunk is loaded while the current one is
// multiplied, so loads stay in flight across row ends. The first chunk is
// loaded before waiting for the previous kernel (weights never depend on
// it), so that wait hides behind HBM latency.
#include "gemv.h"

#include <algorithm>
#include <mutex>
#include <type_traits>
#include <vector>

#include "gemv_common.cuh"

namespace engine {
namespace {

constexpr int kMaxTokens = 2;            // more tokens run on tensor cores (gemv_mma.cu)
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLoads = 4;                // 16-byte loads per lane per chunk
constexpr int kChunkVectors = 32 * kLoads;  // 16-byte vectors of a row per chunk

// Chunks a row of W takes (the last one may be partial).
__host__ __device__ inline int chunksPerRowOf(const GemvParams& p) {
  return (p.vectors + kChunkVectors - 1) / kChunkVectors;
}

__device__ inline float dot8(const uint4& w, const uint4& x) {
  const __nv_bfloat162* wh = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&x);
  float acc = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 a = __bfloat1622float2(wh[k]), b = __bfloat1622float2(xh[k]);
    acc += a.x * b.x + a.y * b.y;
  }
  return acc;
}

// This lane's share of one chunk of kRows rows and, when the input is not
// staged, of the same positions of kTokens inputs.
template <int kRows, int kTokens, bool kStaged>
struct Chunk {
  uint4 w[kRows][kLoads];
  uint4 x[kStaged ? 1 : kTokens][kLoads];

  __device__ void load(const GemvParams& p, const int (&rows)[kRows], int chunk, int lane) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint4* base = p.w + size_t(rows[r]) * p.vectors;
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int v = chunk * kChunkVectors + k * 32 + lane;
        w[r][k] = v < p.vectors ? __ldcs(base + v) : make_uint4(0, 0, 0, 0);
      }
    }
  }

  // Unstaged input: the tokens' rows in (global memory), at this chunk's positions.
  __device__ void loadInput(const uint4* in, int chunk, int lane, int vectors) {
    static_assert(!kStaged, "a staged input is read from shared memory");
#pragma unroll
    for (int b = 0; b < kTokens; ++b) {
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int v = chunk * kChunkVectors + k * 32 + lane;
        x[b][k] = v < vectors ? in[b * vectors + v] : make_uint4(0, 0, 0, 0);
      }
    }
  }

  // xs: the staged inputs (shared memory), or unused.
  __device__ void accumulate(float (&acc)[kRows][kTokens], const uint4* xs, int chunk, int lane, int vectors) const {
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int v = chunk * kChunkVectors + k * 32 + lane;
      if (v >= vectors) break;
#pragma unroll
      for (int b = 0; b < kTokens; ++b) {
        uint4 in;
        if constexpr (kStaged) in = xs[b * vectors + v];
        else in = x[b][k];
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][b] += dot8(w[r][k], in);
      }
    }
  }
};

// The most dynamic shared memory a block stages its inputs in (227 KB on
// H100/H200; some is left for the kernel's static arrays).
constexpr size_t kMaxSharedBytes = 200 * 1024;

// Shared memory of a staged instance of kTokens: its input rows as bf16,
// and the fused norm's fp32 staging (a multiple of 16 bytes: in % 8 == 0).
__host__ __device__ inline size_t stagedBytes(int kTokens, int in) {
  return size_t(kTokens) * in * 2 + size_t(in) * 4;
}

constexpr int kStageBatch = 4;  // groups of 4 values a thread of stageInput loads at once

// The norm weight of a thread's first batch of groups (stageInput), loaded
// before the wait like the products' weights: one round trip fewer after it.
struct NormWeightAhead {
  uint2 w[kStageBatch];
};

__device__ NormWeightAhead loadNormWeightAhead(const GemvParams& p) {
  NormWeightAhead ahead;
  const auto* weight = static_cast<const uint2*>(p.input.normWeight);
#pragma unroll
  for (int k = 0; k < kStageBatch; ++k) {
    const int g = threadIdx.x + k * blockDim.x;
    if (g < p.in / 4) ahead.w[k] = weight[g];
  }
  return ahead;
}

// xs[b * vectors + v] = vector v of token b's normed input, as bf16, for the
// whole block (b < kTokens). A token at a time, its residual + delta kept in
// shared memory (`staged`, fp32, one row past the inputs) between the sum
// of squares and the scaling.
template <int kTokens>
__device__ void stageInput(const GemvParams& p, uint4* xs, const NormWeightAhead& ahead) {
  const GemvInput& in = p.input;
  float4* staged = reinterpret_cast<float4*>(xs + kTokens * p.vectors);
  const int groups = p.in / 4;
  const auto* weight = static_cast<const uint2*>(in.normWeight);
  const auto* delta = static_cast<const uint2*>(in.delta);
  for (int b = 0; b < kTokens; ++b) {
    const float4* residual = reinterpret_cast<const float4*>(in.residual + size_t(b) * p.in);
    float4* residualOut = reinterpret_cast<float4*>(in.residualOut + size_t(b) * p.in);
    float squares = 0;
    // A batch's loads are issued before its stores: block 0's store of the
    // residual could alias the next load and would make it wait otherwise.
    for (int first = threadIdx.x; first < groups; first += kStageBatch * blockDim.x) {
      float4 v[kStageBatch];
      uint2 d[kStageBatch];
#pragma unroll
      for (int k = 0; k < kStageBatch; ++k) {
        const int g = first + k * blockDim.x;
        if (g < groups) v[k] = residual[g];
        if (g < groups && delta) d[k] = delta[size_t(b) * groups + g];
      }
#pragma unroll
      for (int k = 0; k < kStageBatch; ++k) {
        const int g = first + k * blockDim.x;
        if (g >= groups) break;
        if (delta) {
          const float4 e = bf16x4ToFloat4(d[k]);
          v[k] = make_float4(v[k].x + e.x, v[k].y + e.y, v[k].z + e.z, v[k].w + e.w);
        }
        staged[g] = v[k];
        if (blockIdx.x == 0) residualOut[g] = v[k];
        squares += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
      }
    }
    const float scale = rsqrtf(blockSum(squares) / p.in + in.eps);  // its barriers publish `staged`
    for (int first = threadIdx.x; first < groups; first += kStageBatch * blockDim.x) {
      uint2 w[kStageBatch];  // the norm weight's loads, issued together (the first batch's before the wait)
#pragma unroll
      for (int k = 0; k < kStageBatch; ++k) {
        const int g = first + k * blockDim.x;
        if (g < groups) w[k] = first == int(threadIdx.x) ? ahead.w[k] : weight[g];
      }
#pragma unroll
      for (int k = 0; k < kStageBatch; ++k) {
        const int g = first + k * blockDim.x;
        if (g >= groups) break;
        const float4 u = bf16x4ToFloat4(w[k]), v = staged[g];
        reinterpret_cast<uint2*>(xs + b * p.vectors)[g] = float4ToBf16x4(
            make_float4(v.x * scale * u.x, v.y * scale * u.y, v.z * scale * u.z, v.w * scale * u.w));
      }
    }
    __syncthreads();  // `staged` is rewritten by the next token
  }
}

// A warp works in units of weight rows: one output of the paired epilogues
// (two rows: rowsOf), one plain output, or, in the kPlainPairs instance,
// two neighbouring plain outputs, so that each chunk of a plain input, read
// beside the weights, serves two rows (launchCudaCore says when).
template <Epilogue kEpilogue, bool kPlainPairs>
constexpr int kUnitRows = kEpilogue != Epilogue::Plain || kPlainPairs ? 2 : 1;

template <bool kPlainPairs>
int unitsOf(const GemvParams& p) {
  return kPlainPairs ? (p.out + 1) / 2 : p.out;
}

// The weight rows of unit u (a plain pair's second row is its first again
// past an odd last output: read, never written).
template <Epilogue kEpilogue, bool kPlainPairs>
__device__ inline void unitRows(const GemvParams& p, int u, int (&rows)[kUnitRows<kEpilogue, kPlainPairs>]) {
  if constexpr (kEpilogue != Epilogue::Plain) {
    rowsOf<kEpilogue>(p, u, rows);
  } else if constexpr (kPlainPairs) {
    rows[0] = 2 * u;
    rows[1] = min(2 * u + 1, p.out - 1);
  } else {
    rows[0] = u;
  }
}

// The outputs of unit u for token b from its rows' sums.
template <Epilogue kEpilogue, typename OutT, bool kExchange, bool kPlainPairs, int kRows>
__device__ void finishUnit(const GemvParams& p, int u, int b, const int (&rows)[kRows], const float (&sum)[kRows],
                           const QkvShared& qkv, uint32_t call) {
  if constexpr (kPlainPairs) {
    for (int r = 0; r < 2 && 2 * u + r < p.out; ++r) {
      const int row[1] = {2 * u + r};
      finish<kEpilogue, OutT, kExchange>(p, row[0], b, row, &sum[r], qkv, call);
    }
  } else {
    finish<kEpilogue, OutT, kExchange>(p, u, b, rows, sum, qkv, call);
  }
}

// The all-reduce fused into a plain product (kExchange, p.reduce): once
// this warp has put its outputs [rowBegin, rowEnd) of every token into the
// exchange, it sums the groups of 4 that start among them (one lane a group
// and token) over the ranks and writes them to y as bf16. A block's rows
// start at a multiple of 8 and p.out % 4 == 0, so a group's other outputs
// come from the same block (a later warp, or this one): no block waits for
// another of its grid, which may not be resident yet. A failed gather leaves
// its outputs unwritten: the wait recorded the communicator's error, which
// the engine reads after every sync (GpuAllReduce::checkPeers) and throws on.
__device__ void sumOverRanks(const GemvParams& p, uint32_t call, int rowBegin, int rowEnd, int lane) {
  const int firstGroup = (rowBegin + 3) / 4, groups = (rowEnd + 3) / 4 - firstGroup;
  for (int task = lane; task < groups * p.tokens; task += 32) {
    const int b = task / groups, j = 4 * (firstGroup + task % groups);
    const size_t index[1] = {size_t(b) * p.out + j};
    float4 sum[1];
    if (!rcn_device::rcnDeviceGather4<1>(p.exchange, call, index, sum)) continue;
    reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.y) + index[0])[0] = float4ToBf16x4(sum[0]);
  }
}

// The end of a split block: the units whose parts it ran (all of them: its
// run starts at a unit's first part and holds whole units), each token's sums
// added in part order, so the result does not depend on timing.
template <Epilogue kEpilogue, typename OutT, bool kPlainPairs, int kRows, int kTokens, int kSplit>
__device__ void finishSplitUnits(const GemvParams& p, int blockFirst, const float* partSums, const QkvShared& qkv) {
  __syncthreads();  // every warp's parts are in shared memory
  const int unitBegin = blockFirst / kSplit;
  const int unitEnd = min(p.units, (blockFirst + kWarps * p.unitsPerWarp) / kSplit);
  for (int task = threadIdx.x; task < (unitEnd - unitBegin) * kTokens; task += blockDim.x) {
    const int u = unitBegin + task / kTokens, b = task % kTokens;
    float sum[kRows] = {};
    for (int part = 0; part < kSplit; ++part)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        sum[r] += partSums[((u * kSplit + part - blockFirst) * kTokens + b) * kRows + r];
    int rows[kRows];
    unitRows<kEpilogue, kPlainPairs>(p, u, rows);
    finishUnit<kEpilogue, OutT, false, kPlainPairs, kRows>(p, u, b, rows, sum, qkv, 0);
  }
}

// Staged (the fused norm in front): the input rows in shared memory. Plain:
// each lane loads its share of the input with the chunk's weights (from L2
// after the first block's reads), so the products start without a staging
// pass (measured on H200: llama3-1b TP=1 decode step 896 -> 808 us at batch 1).
// kExchange: the instance that sums its outputs over the ranks (plain input,
// bf16 out: sumOverRanks); a separate instance, because the exchange's code
// in the common one slowed every product (llama3-8b TP=1 decode 4060 -> 4247
// us a step on H200, unused).
// kSplit > 1: each unit's chunks are cut into kSplit parts along K, and a
// warp's work is a run of parts (splitShortens says when); the block adds its
// units' parts in part order from shared memory at the end.
template <int kTokens, Epilogue kEpilogue, typename OutT, bool kStaged, bool kExchange, bool kPlainPairs, int kSplit>
__global__ void __launch_bounds__(kThreads) gemvKernel(GemvParams p) {
  static_assert(kSplit == 1 || !kExchange, "the exchange puts whole outputs");
  constexpr int kRows = kUnitRows<kEpilogue, kPlainPairs>;
  // staged: [kTokens][vectors] bf16, then the norm's fp32 staging [in]; then, split, the parts' sums
  extern __shared__ uint4 xs[];
  const int lane = threadIdx.x % 32;
  const int chunksPerRow = chunksPerRowOf(p);
  const int chunksPerPart = chunksPerRow / kSplit;  // whole: splitShortens
  // p.unitsPerWarp counts parts; a block's run starts at a unit's first part (kWarps * parts a warp is even).
  const int blockFirst = blockIdx.x * kWarps * p.unitsPerWarp;
  const int first = blockFirst + threadIdx.x / 32 * p.unitsPerWarp;
  const int parts = max(0, min(p.units * kSplit, first + p.unitsPerWarp) - first);
  const int items = parts * chunksPerPart;
  const uint4* input = static_cast<const uint4*>(p.input.x);  // unstaged only
  float* partSums = reinterpret_cast<float*>(xs + (kStaged ? stagedBytes(kTokens, p.in) / 16 : 0));
  // The chunk of W behind item i of this warp.
  auto chunkOf = [&](int item) {
    return (first + item / chunksPerPart) % kSplit * chunksPerPart + item % chunksPerPart;
  };

  int rows[kRows], nextRows[kRows];
  Chunk<kRows, kTokens, kStaged> current;
  if (items > 0) {
    unitRows<kEpilogue, kPlainPairs>(p, first / kSplit, rows);
    current.load(p, rows, chunkOf(0), lane);
  }
  __shared__ QkvShared qkv;  // the QKV epilogue's only
  stageRopeFreqs<kEpilogue>(p, qkv);
  NormWeightAhead ahead;
  if constexpr (kStaged) ahead = loadNormWeightAhead(p);
  waitForPrevious(/*letNextIn=*/!kExchange);  // the input is the previous kernel's output
  const QkvToken token = loadQkvToken<kEpilogue>(p);
  const uint32_t call = kExchange ? exchangeCall(p) : 0;
  if constexpr (kStaged) {
    stageInput<kTokens>(p, xs, ahead);
  } else {
    if (items > 0) current.loadInput(input, chunkOf(0), lane, p.vectors);
  }
  storeQkvTokens<kEpilogue>(p, token, qkv);

  float acc[kRows][kTokens] = {};
  for (int item = 0; item < items; ++item) {
    const int part = first + item / chunksPerPart, chunk = chunkOf(item);
    Chunk<kRows, kTokens, kStaged> next;
    if (item + 1 < items) {
      unitRows<kEpilogue, kPlainPairs>(p, (first + (item + 1) / chunksPerPart) / kSplit, nextRows);
      next.load(p, nextRows, chunkOf(item + 1), lane);
      if constexpr (!kStaged) next.loadInput(input, chunkOf(item + 1), lane, p.vectors);
    }
    current.accumulate(acc, xs, chunk, lane, p.vectors);
    current = next;
    if (item % chunksPerPart == chunksPerPart - 1) {
#pragma unroll
      for (int b = 0; b < kTokens; ++b) {
        float sum[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) sum[r] = warpSum(acc[r][b]), acc[r][b] = 0;
        if (lane == 0) {
          if constexpr (kSplit == 1) {
            finishUnit<kEpilogue, OutT, kExchange, kPlainPairs, kRows>(p, part, b, rows, sum, qkv, call);
          } else {
#pragma unroll
            for (int r = 0; r < kRows; ++r) partSums[((part - blockFirst) * kTokens + b) * kRows + r] = sum[r];
          }
        }
      }
    }
    if (item + 1 < items) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) rows[r] = nextRows[r];
    }
  }
  if constexpr (kSplit > 1)
    finishSplitUnits<kEpilogue, OutT, kPlainPairs, kRows, kTokens, kSplit>(p, blockFirst, partSums, qkv);
  if constexpr (kExchange) {
    if (p.reduce) {
      __syncwarp();  // lane 0 put the outputs
      sumOverRanks(p, call, first * kRows, min((first + parts) * kRows, p.out), lane);  // unsplit: parts are units
      __syncthreads();  // the block's last gather is done
      rcn_device::rcnDeviceEndCall(p.exchange, call);
    }
  }
}

// Launches the instance for (tokens, epilogue, output type) with a grid of
// the blocks that fit at once, every warp taking the same number of units
// (no tail of half-idle SMs). Only a normed input is staged.
template <int kTokens, Epilogue kEpilogue, typename OutT, bool kStaged, bool kExchange = false,
          bool kPlainPairs = false, int kSplit = 1>
cudaError_t launchInstance(GemvParams p, Launch on) {
  constexpr auto kernel = gemvKernel<kTokens, kEpilogue, OutT, kStaged, kExchange, kPlainPairs, kSplit>;
  const size_t staged = kStaged ? stagedBytes(kTokens, p.in) : 0;
  int blocks = 0;
  cudaError_t e = gemvBlocksFor<kernel>(kThreads, staged, &blocks);
  if (e != cudaSuccess) return e;
  const int warps = blocks * kWarps;
  p.units = unitsOf<kPlainPairs>(p);
  const int parts = p.units * kSplit;
  p.unitsPerWarp = (parts + warps - 1) / warps;
  const int busyWarps = (parts + p.unitsPerWarp - 1) / p.unitsPerWarp;
  const int grid = (busyWarps + kWarps - 1) / kWarps;
  if (kExchange && grid > p.exchange.maxBlocks) return cudaErrorInvalidConfiguration;
  // A split block keeps its parts' sums (a few hundred bytes) past the staging.
  constexpr int kRows = kUnitRows<kEpilogue, kPlainPairs>;
  const size_t sums = kSplit > 1 ? size_t(kWarps) * p.unitsPerWarp * kTokens * kRows * sizeof(float) : 0;
  const size_t smem = staged + sums;
  if (smem != staged && (e = allowKernelShared<kernel>(smem)) != cudaSuccess) return e;
  return launch(kernel, dim3(grid), dim3(kThreads), smem, on, p);
}

// Whether cutting each unit of a staged paired product (QKV, gate/up) into
// two parts along K gives the busiest warp a chain of chunks shorter by two
// or more: where the units are a little more than the warps can take evenly,
// more of the warps share the work. The block's final pass over its units
// costs about one chunk (H200, 2026-12-01, one call, two rounds: llama3-8b's
// gate/up at TP=2, 7168 units for 2112 warps, 16 chunks for the busiest warp,
// 14 split, and its QKV at TP=1, 8 chunks, 6 split: TP=1 3952.6 -> 3890.2 us
// a step at batch 1, the half of TP=2 (--shard-of 2) 2226.4 -> 2171.5;
// llama3-1b's QKV at TP=2, 2 chunks, 1 split: 516.2 -> 520.4, so not there).
template <int kTokens, Epilogue kEpilogue, typename OutT>
bool splitShortens(const GemvParams& p) {
  const int chunksPerRow = chunksPerRowOf(p);
  if (chunksPerRow % 2 != 0) return false;
  const size_t smem = stagedBytes(kTokens, p.in);
  int whole = 0, split = 0;
  constexpr auto kWhole = gemvKernel<kTokens, kEpilogue, OutT, true, false, false, 1>;
  constexpr auto kSplitK = gemvKernel<kTokens, kEpilogue, OutT, true, false, false, 2>;
  if (gemvBlocksFor<kWhole>(kThreads, smem, &whole) != cudaSuccess ||
      gemvBlocksFor<kSplitK>(kThreads, smem, &split) != cudaSuccess)
    return false;
  // The busiest warp's chunks when each unit is cut into `parts` over `blocks` resident blocks.
  auto chain = [&](int parts, int blocks) {
    const int64_t warps = int64_t(blocks) * kWarps;
    return (parts * int64_t(p.out) + warps - 1) / warps * (chunksPerRow / parts);
  };
  return chain(2, split) + 1 < chain(1, whole);
}

// The warps of an unstaged instance kKernel that fit on the GPU at once (0
// when the lookup fails: the launch then reports it).
template <auto kKernel>
int64_t residentWarps() {
  int blocks = 0;
  return gemvBlocksFor<kKernel>(kThreads, 0, &blocks) == cudaSuccess ? int64_t(blocks) * kWarps : 0;
}

// Whether a plain product of one token has pairs for at least 3/4 of the
// resident warps of the pairs instance: pairs halve the input reads and each
// warp's chain of chunks, but fewer busy warps are fewer loads in flight
// (H200, TP=1 decode, 2026-12-01: pairs for every plain product took
// llama3-8b, whose 4096-row products give 2048 pairs to 2112 warps, from
// 3961.5 to 3883.8 us a step, and llama3-1b, whose 2048-row products then
// kept half the warps idle, from 798.5 to 830.6). Only the one-token plain
// instances pair (with or without the all-reduce): at 2 tokens or staged,
// the registers would cost a block an SM.
template <typename OutT, bool kExchange>
bool pairsFill(const GemvParams& p) {
  const int64_t warps = residentWarps<gemvKernel<1, Epilogue::Plain, OutT, false, kExchange, true, 1>>();
  return warps > 0 && 4 * int64_t(unitsOf<true>(p)) >= 3 * warps;
}

// A plain product of one token takes the tensor-core kernel instead when
// its CUDA-core instance would give some warps more than one unit yet keep
// fewer than kMinBusyShare of its warps busy (every warp taking as many as
// the busiest one): the tensor-core kernel splits rows along K across warps
// and spreads even shares over the SMs (H200, TP=1 decode step, 2026-12-01:
// qwen3-32b's 5120-row O and down products, 2 pairs a warp for 61 % of the
// warps at one token, took the step from 18618 to 16732 us at batch 1;
// llama3's one-token products, 95-99 % busy, were slower on tensor cores).
// Never with the all-reduce, which the tensor-core kernel does not do. (Two
// tokens always take the tensor-core kernel: launchPlain.)
constexpr double kMinBusyShare = 0.9;

template <auto kKernel>
bool unevenOnCudaCores(int units) {
  const int64_t warps = residentWarps<kKernel>();
  if (warps == 0) return false;
  const int64_t perWarp = (units + warps - 1) / warps;
  return perWarp > 1 && units < kMinBusyShare * double(perWarp * warps);
}

// One token: the CUDA-core instance, or the tensor-core kernel where unevenOnCudaCores says so.
template <typename OutT, bool kExchange, bool kPlainPairs>
cudaError_t launchOneTokenPlain(const GemvParams& p, Launch on) {
  constexpr auto kernel = gemvKernel<1, Epilogue::Plain, OutT, false, kExchange, kPlainPairs, 1>;
  if (!kExchange && unevenOnCudaCores<kernel>(unitsOf<kPlainPairs>(p)))
    return launchGemvMma<Epilogue::Plain, OutT>(p, on);
  return launchInstance<1, Epilogue::Plain, OutT, false, kExchange, kPlainPairs>(p, on);
}

// A plain product of one token: on CUDA cores, in pairs of rows where
// pairsFill says so, unless launchOneTokenPlain hands it on. Of two tokens:
// on tensor cores, where the input is read once for every 16 rows (the
// CUDA-core instance, one row a warp, read twice the weights' bytes of input
// from L2; H200, 2026-12-01, one call, two rounds within 0.2 %: llama3-8b
// TP=1 decode at batch 2 4273.0 -> 4102.9 us a step, the half of TP=2
// 2445.5 -> 2403.3, llama3-1b 887.6 -> 871.4, its half 592.6 -> 596.2),
// except the all-reduce's, which only the CUDA-core kernel does.
template <typename OutT, bool kExchange>
cudaError_t launchPlain(const GemvParams& p, Launch on) {
  if (p.tokens == 2) {
    if constexpr (kExchange) return launchInstance<2, Epilogue::Plain, OutT, false, true>(p, on);
    else return launchGemvMma<Epilogue::Plain, OutT>(p, on);
  }
  if (pairsFill<OutT, kExchange>(p)) return launchOneTokenPlain<OutT, kExchange, true>(p, on);
  return launchOneTokenPlain<OutT, kExchange, false>(p, on);
}

// A product of kTokens tokens that launchPlain does not take: the instance
// with each unit cut in two along K where splitShortens says so (normed
// paired products only), else the whole-unit one.
template <int kTokens, Epilogue kEpilogue, typename OutT, bool kStaged>
cudaError_t launchTokens(const GemvParams& p, Launch on) {
  if constexpr (kStaged && kEpilogue != Epilogue::Plain) {
    if (splitShortens<kTokens, kEpilogue, OutT>(p))
      return launchInstance<kTokens, kEpilogue, OutT, kStaged, false, false, 2>(p, on);
  }
  return launchInstance<kTokens, kEpilogue, OutT, kStaged>(p, on);
}

// The CUDA-core instance for p.tokens (1-2) tokens; the all-reduce's
// (p.reduce) for plain bf16 products only, the ones the engine sums.
template <Epilogue kEpilogue, typename OutT, bool kStaged>
cudaError_t launchCudaCore(const GemvParams& p, Launch on) {
  if constexpr (kEpilogue == Epilogue::Plain && !kStaged) {
    if (!p.reduce) return launchPlain<OutT, false>(p, on);
    if constexpr (std::is_same_v<OutT, __nv_bfloat16>) return launchPlain<OutT, true>(p, on);
  }
  if (p.reduce) return cudaErrorInvalidValue;
  return p.tokens == 1 ? launchTokens<1, kEpilogue, OutT, kStaged>(p, on)
                       : launchTokens<2, kEpilogue, OutT, kStaged>(p, on);
}

// The kernel for p.tokens tokens: CUDA cores for 1-2, tensor cores for more
// (never with an exchange: exchangeFits).
static_assert(kGemvExchangeMaxTokens <= kMaxTokens, "only the CUDA-core kernel exchanges");

template <Epilogue kEpilogue, typename OutT>
cudaError_t launchFor(const GemvParams& p, Launch on) {
  if (p.tokens > kMaxTokens) return launchGemvMma<kEpilogue, OutT>(p, on);
  return p.input.normed() ? launchCudaCore<kEpilogue, OutT, true>(p, on) : launchCudaCore<kEpilogue, OutT, false>(p, on);
}

GemvParams paramsFor(const GemvInput& input, void* y, const void* w, int n, int out, int in, int pairRows) {
  GemvParams p{};
  p.y = y;
  p.w = static_cast<const uint4*>(w);
  p.input = input;
  p.out = out;
  p.in = in;
  p.vectors = in / 8;
  p.pairRows = pairRows;
  p.tokens = n;
  return p;
}

// Whether n tokens of `out` outputs can be summed over the ranks of an
// exchange: the CUDA-core kernel's token counts, whole groups of 4, and the
// window.
bool exchangeFits(const rcnDeviceComm& exchange, int n, int out) {
  return n <= kGemvExchangeMaxTokens && out % 4 == 0 && size_t(n) * out <= exchange.maxValues;
}

// What a launch of n tokens can take: an output to compute, and an input
// gemvFits takes (a normed one of 1-2 tokens whose rows and staging fit; a
// plain one of any size).
bool launchable(const GemvInput& input, int n, int out, int in) {
  return out >= 1 && gemvFits(n, in, input.normed());
}

}  // namespace

cudaError_t gemvResidentBlocks(const void* kernel, int threads, size_t smem, int* blocks) {
  struct Known {
    const void* kernel;
    int device;
    size_t smem;
    int blocks;
  };
  static std::mutex mutex;
  static std::vector<Known> known;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mutex);
  for (const Known& k : known) {
    if (k.kernel == kernel && k.device == device && k.smem == smem) {
      *blocks = k.blocks;
      return cudaSuccess;
    }
  }
  int sms = 0, perSm = 0;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, smem);
  if (e != cudaSuccess) return e;
  *blocks = std::max(1, sms * perSm);
  known.push_back({kernel, device, smem, *blocks});
  return cudaSuccess;
}

// A normed input runs on CUDA cores (1-2 tokens) when its rows and the
// norm's staging fit in a block's shared memory; a plain input is not
// staged. At 3-8 tokens the norm is a kernel of its own in front (GpuModel),
// which measured faster than staging every token in every block of the
// tensor-core kernel (H200, TP=1 decode step, 2026-12-01, with the norm
// kernel of then: llama3-8b batch 8 4558 against 4686 us, llama3-1b batch 4
// and 8 956 / 1009 against 989 / 1042; only llama3-8b batch 4 was slower,
// 4444 against 4416, and faster once the norm kernel issued its loads
// together: 4250).
bool gemvFits(int n, int in, bool norm) {
  if (n < 1 || n > kGemvMaxTokens || in < 8 || in % 8 != 0) return false;
  if (n > kMaxTokens) return !norm;
  return !norm || stagedBytes(n, in) <= kMaxSharedBytes;
}

cudaError_t launchGemv(const GemvInput& input, void* y, bool yIsFloat, const void* w, int n, int out, int in,
                       Launch on, const rcnDeviceComm* sumWith) {
  if (!launchable(input, n, out, in) ||
      (sumWith && (input.normed() || yIsFloat || !exchangeFits(*sumWith, n, out))))
    return cudaErrorInvalidValue;
  GemvParams p = paramsFor(input, y, w, n, out, in, 0);
  if (sumWith) p.reduce = true, p.exchange = *sumWith;
  return yIsFloat ? launchFor<Epilogue::Plain, float>(p, on) : launchFor<Epilogue::Plain, __nv_bfloat16>(p, on);
}

cudaError_t launchGemvSwiGlu(const GemvInput& input, void* act, const void* gateUp, int n, int hidden, int in,
                             Launch on) {
  if (!launchable(input, n, hidden, in)) return cudaErrorInvalidValue;
  const GemvParams p = paramsFor(input, act, gateUp, n, hidden, in, hidden);
  return launchFor<Epilogue::SwiGlu, __nv_bfloat16>(p, on);
}

cudaError_t launchGemvQkv(const GemvInput& input, void* qkv, const void* w, const QkvEpilogue& epilogue, int n,
                          int in, Launch on) {
  const AttentionShape& s = epilogue.shape;
  const int pairs = (s.heads + 2 * s.kvHeads) * s.headDim / 2;
  if (!launchable(input, n, pairs, in) || s.headDim % 2 != 0 || s.headDim > kAttentionMaxHeadDim)
    return cudaErrorInvalidValue;
  GemvParams p = paramsFor(input, qkv, w, n, pairs, in, 0);
  p.qkv = epilogue;
  return launchFor<Epilogue::Qkv, __nv_bfloat16>(p, on);
}

}  // namespace engine
