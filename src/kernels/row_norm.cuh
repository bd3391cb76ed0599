// SPDX-License-Identifier: BSD-3-Clause
// Device code shared by the separate norm kernel (residual_norm.cu) and the
// fused p2p kernel (fused_norm.cu): one block normalizes one row at a time,
// in the order kernels/norm_math.h defines, so both give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/device_common.cuh"
#include "kernels/norm_math.h"

namespace rcn {

namespace {

// Four output elements: 8 bytes of a 16-bit type, 4 of e4m3.
template <typename Out>
using OutQuad = typename std::conditional<sizeof(Out) == 2, uint2, uint32_t>::type;

__device__ inline bool alignedTo(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The new residual of the unit of 4 elements at `first` of a row, in
// registers: `quad` (the old residual) gets the summed partials `sum` added,
// and the squares go into `squares` in element order. Elements past
// `hidden` are left alone.
template <typename T>
__device__ inline void addResidualQuad(const uint2& sum, uint2& quad, size_t first, size_t hidden, float& squares) {
  const T* s = reinterpret_cast<const T*>(&sum);
  T* r = reinterpret_cast<T*>(&quad);
#pragma unroll
  for (int j = 0; j < kNormUnitElems; ++j) {
    if (first + j >= hidden) break;
    r[j] = addResidual(s[j], r[j]);
    squares = addSquare(squares, ElemTraits<T>::toAcc(r[j]));
  }
}

// addResidualQuad on the residual in memory: read, added, written back.
template <typename T>
__device__ inline void residualUnit(const uint2& sum, T* residualRow, size_t first, size_t hidden, bool aligned,
                                    float& squares) {
  uint2 quad = loadChunk<T, uint2>(residualRow, first, hidden, aligned);
  addResidualQuad<T>(sum, quad, first, hidden, squares);
  storeChunk<T, uint2>(residualRow, first, hidden, aligned, quad);
}

// The row's sum of squares from each thread's part: warps by halving, then
// the warps in order (norm_math.h). Every thread of the block calls it and
// gets the total; `shared` holds kNormMaxWarps + 1 floats.
__device__ inline float blockSumSquares(float mine, float* shared) {
  for (int offset = kNormWarp / 2; offset > 0; offset /= 2) mine += __shfl_xor_sync(0xffffffffu, mine, offset);
  const int warp = threadIdx.x / kNormWarp;
  if (threadIdx.x % kNormWarp == 0) shared[warp] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = shared[0];
    for (int w = 1; w < static_cast<int>(blockDim.x) / kNormWarp; ++w) total += shared[w];
    shared[kNormMaxWarps] = total;
  }
  __syncthreads();
  // The next row writes shared[warp] and shared[kNormMaxWarps] only after
  // its own first barrier, which every thread reaches after this read.
  return shared[kNormMaxWarps];
}

// Four normalized outputs from four residual and weight elements.
template <typename T, typename Out>
__device__ inline OutQuad<Out> normQuad(const uint2& x, const uint2& w, float inv, const float* scale) {
  const T* xe = reinterpret_cast<const T*>(&x);
  const T* we = reinterpret_cast<const T*>(&w);
  OutQuad<Out> quad{};
  Out* o = reinterpret_cast<Out*>(&quad);
#pragma unroll
  for (int j = 0; j < kNormUnitElems; ++j)
    o[j] = normOutput<Out>(ElemTraits<T>::toAcc(xe[j]), inv, ElemTraits<T>::toAcc(we[j]), scale);
  return quad;
}

// normOut of one row from the residual this block has just written (each
// thread reads back its own units).
template <typename T, typename Out>
__device__ inline void writeNormRow(const T* residualRow, const T* weight, Out* outRow, size_t hidden, float inv,
                                    const float* scale) {
  const bool residualAligned = alignedTo(residualRow, 8), weightAligned = alignedTo(weight, 8),
             outAligned = alignedTo(outRow, sizeof(OutQuad<Out>));
  for (size_t first = threadIdx.x * size_t(kNormUnitElems); first < hidden;
       first += size_t(blockDim.x) * kNormUnitElems) {
    const uint2 x = loadChunk<T, uint2>(residualRow, first, hidden, residualAligned);
    const uint2 w = loadChunk<T, uint2>(weight, first, hidden, weightAligned);
    storeChunk<Out, OutQuad<Out>>(outRow, first, hidden, outAligned, normQuad<T, Out>(x, w, inv, scale));
  }
}

// ---- a row held in registers ----------------------------------------------
// Rows of at most kNormRowUnits units a thread (hidden up to 8192 at 1024
// threads) keep each thread's units of the residual and the weight in
// registers from before the sum to the output: the old residual and the
// weight are read once, all of a thread's loads are in flight together, and
// the new residual is not read back. The units and their order are those of
// the loops above (unit k of a thread: threadIdx.x + k * blockDim.x), so the
// bits are the same. Wider rows take the loops.
constexpr int kNormRowUnits = 2;

__device__ inline bool rowFitsRegisters(size_t hidden) {
  return (hidden + kNormUnitElems - 1) / kNormUnitElems <= size_t(blockDim.x) * kNormRowUnits;
}

// The first element of this thread's unit k of a row.
__device__ inline size_t rowUnitFirst(int k) { return (threadIdx.x + size_t(k) * blockDim.x) * kNormUnitElems; }

struct RowUnits {
  uint2 residual[kNormRowUnits];
  uint2 weight[kNormRowUnits];
};

template <typename T>
__device__ inline void loadRowUnits(RowUnits& row, const T* residualRow, const T* weight, size_t hidden) {
  const bool residualAligned = alignedTo(residualRow, 8), weightAligned = alignedTo(weight, 8);
#pragma unroll
  for (int k = 0; k < kNormRowUnits; ++k) {
    const size_t first = rowUnitFirst(k);
    if (first >= hidden) break;
    row.residual[k] = loadChunk<T, uint2>(residualRow, first, hidden, residualAligned);
    row.weight[k] = loadChunk<T, uint2>(weight, first, hidden, weightAligned);
  }
}

// writeNormRow from the registers.
template <typename T, typename Out>
__device__ inline void writeNormUnits(const RowUnits& row, Out* outRow, size_t hidden, float inv, const float* scale) {
  const bool outAligned = alignedTo(outRow, sizeof(OutQuad<Out>));
#pragma unroll
  for (int k = 0; k < kNormRowUnits; ++k) {
    const size_t first = rowUnitFirst(k);
    if (first >= hidden) break;
    storeChunk<Out, OutQuad<Out>>(outRow, first, hidden, outAligned,
                                  normQuad<T, Out>(row.residual[k], row.weight[k], inv, scale));
  }
}

}  // namespace

}  // namespace rcn

// The (T, Out) instances of kernel template K as an initializer for
// table[2][2]: rows fp16, bf16; columns Out = T, Out = e4m3.
#define RCN_NORM_KERNEL_TABLE(K)                                       \
  {                                                                    \
    {K<__half, __half>, K<__half, __nv_fp8_e4m3>}, {                   \
      K<__nv_bfloat16, __nv_bfloat16>, K<__nv_bfloat16, __nv_fp8_e4m3> \
    }                                                                  \
  }
