// SPDX-License-Identifier: BSD-3-Clause
// The residual add + RMSNorm after a sum all-reduce (residual_norm.h): the
// separate kernel, run after rcnAllReduce or NCCL, and the p2p kernel that
// does the all-reduce too, in one launch. Both normalize a row per block
// with row_norm.cuh, so they give the same bits. Instances: (fp16, bf16) x
// (Out = the input type, e4m3) for each kernel.
#include "kernels/residual_norm.h"

#include <algorithm>

#include "core/mix64.h"
#include "kernels/kernel_launch.cuh"
#include "kernels/one_shot_call.cuh"
#include "kernels/row_norm.cuh"

namespace rcn {

namespace {

// Rows the separate kernel's grid covers at once; more loop.
constexpr size_t kNormMaxBlocks = 1024;

// The output scale, read once (normOutput reads it only for e4m3).
__device__ inline float loadScale(const ResidualNormCall& c) { return c.normScale ? *c.normScale : 1.0f; }

template <typename T, typename Out>
__global__ void __launch_bounds__(kNormMaxThreads) residualNormKernel(const ResidualNormCall c, const T* sum) {
  __shared__ float warpSums[kNormMaxWarps + 1];
  // It waits for no peer, so the next kernel may come in at once: a waiting
  // kernel let in by it lets nothing in before its own waits are over.
  rcnDeviceLetNextKernelIn();
  rcnDeviceWaitForPreviousKernels();
  const float scale = loadScale(c);
  const T* weight = static_cast<const T*>(c.weight);
  T* residual = static_cast<T*>(c.residual);
  for (size_t row = blockIdx.x; row < c.tokens; row += gridDim.x) {
    const T* sumRow = sum + row * c.hidden;
    T* residualRow = residual + row * c.hidden;
    Out* outRow = static_cast<Out*>(c.normOut) + row * c.hidden;
    const bool sumAligned = alignedTo(sumRow, 8), residualAligned = alignedTo(residualRow, 8);
    float squares = 0.0f;
    if (rowFitsRegisters(c.hidden)) {
      RowUnits units;
      uint2 sums[kNormRowUnits];
      loadRowUnits(units, residualRow, weight, c.hidden);
#pragma unroll
      for (int k = 0; k < kNormRowUnits; ++k) {
        const size_t first = rowUnitFirst(k);
        if (first >= c.hidden) break;
        sums[k] = loadChunk<T, uint2>(sumRow, first, c.hidden, sumAligned);
      }
#pragma unroll
      for (int k = 0; k < kNormRowUnits; ++k) {
        const size_t first = rowUnitFirst(k);
        if (first >= c.hidden) break;
        addResidualQuad<T>(sums[k], units.residual[k], first, c.hidden, squares);
        storeChunk<T, uint2>(residualRow, first, c.hidden, residualAligned, units.residual[k]);
      }
      const float inv = inverseRms(blockSumSquares(squares, warpSums), c.hidden, c.eps);
      writeNormUnits<T, Out>(units, outRow, c.hidden, inv, &scale);
      continue;
    }
    for (size_t first = threadIdx.x * size_t(kNormUnitElems); first < c.hidden;
         first += size_t(blockDim.x) * kNormUnitElems)
      residualUnit(loadChunk<T, uint2>(sumRow, first, c.hidden, sumAligned), residualRow, first, c.hidden,
                   residualAligned, squares);
    const float inv = inverseRms(blockSumSquares(squares, warpSums), c.hidden, c.eps);
    writeNormRow<T, Out>(residualRow, weight, outRow, c.hidden, inv, &scale);
  }
}

// The one-shot LL protocol (one_shot.cu, runLL) over rows: block b puts the
// units of its rows into every peer's lines, then, row by row, waits for
// each peer's units, sums them in rank order into the dtype (rcnAllReduce's
// bits), adds the residual and normalizes the row.
template <typename T, typename Out>
__global__ void __launch_bounds__(kNormMaxThreads) fusedNormKernel(const OneShotArgs a, const ResidualNormCall c) {
  __shared__ float warpSums[kNormMaxWarps + 1];
  rcnDeviceWaitForPreviousKernels();
  const uint32_t call = callNumber(a);
  if (call == 0) return;  // an earlier call lost a peer: do nothing, never wait again
  const int me = a.rank, n = a.nranks, phase = call & 1;
  const uint32_t tag = callTag(call, a.signature);
  const T* send = static_cast<const T*>(c.send);
  const bool sendAligned = alignedTo(send, 8);
  const size_t count = c.tokens * c.hidden, unitsPerRow = c.hidden / kNormUnitElems;

  // 1. This block's rows, each unit tagged twice, into every peer's lines.
  for (size_t row = blockIdx.x; row < c.tokens; row += gridDim.x)
    for (size_t u = threadIdx.x; u < unitsPerRow; u += blockDim.x) {
      const size_t unit = row * unitsPerRow + u;
      const uint2 d = loadChunk<T, uint2>(send, unit * kNormUnitElems, count, sendAligned);
      const uint4 line = make_uint4(d.x, tag, d.y, tag);
      for (int i = 1; i < n; ++i) storeLine(linesOf(a, (me + i) % n, phase, me) + unit, line);
    }

  // 2. Row by row: every rank's units summed in rank order, then the norm.
  //    A row that fits registers has its residual and weight loaded first,
  //    while the peers' lines are still arriving.
  const float scale = loadScale(c);
  const T* weight = static_cast<const T*>(c.weight);
  T* residual = static_cast<T*>(c.residual);
  const bool inRegisters = rowFitsRegisters(c.hidden);
  for (size_t row = blockIdx.x; row < c.tokens; row += gridDim.x) {
    T* residualRow = residual + row * c.hidden;
    Out* outRow = static_cast<Out*>(c.normOut) + row * c.hidden;
    const bool residualAligned = alignedTo(residualRow, 8);
    RowUnits units;
    if (inRegisters) loadRowUnits(units, residualRow, weight, c.hidden);
    float squares = 0.0f;
    int failed = 0;
    // Unit k of this thread (k counts only in registers).
    const auto sumUnit = [&](size_t u, uint2* sumOut) {
      const size_t unit = row * unitsPerRow + u;
      float acc[kNormUnitElems];
      for (int r = 0; r < n; ++r) {
        uint2 d;
        if (r == me) {
          d = loadChunk<T, uint2>(send, unit * kNormUnitElems, count, sendAligned);
        } else {
          const uint4* src = linesOf(a, me, phase, r) + unit;
          const uint32_t why = waitForLine(
              src, tag, &d, [&](WaitBudget& b) { return waitCheckPeer(b, a, phase, r, /*waitingInLL=*/true); });
          if (why != kOneShotOk) {
            recordError(a, why, r, call);
            return false;
          }
          storeLine(const_cast<uint4*>(src), make_uint4(0, 0, 0, 0));  // a line holds 0 or the current call
        }
        accumulate<T, OpSum>(acc, d, r == 0);
      }
      *sumOut = finishChunk<T, OpSum, uint2>(acc, n);
      return true;
    };
    if (inRegisters) {
#pragma unroll
      for (int k = 0; k < kNormRowUnits; ++k) {
        const size_t u = threadIdx.x + size_t(k) * blockDim.x;
        if (u >= unitsPerRow || failed) break;
        uint2 sum;
        if (!sumUnit(u, &sum)) {
          failed = 1;
          break;
        }
        addResidualQuad<T>(sum, units.residual[k], u * kNormUnitElems, c.hidden, squares);
        storeChunk<T, uint2>(residualRow, u * kNormUnitElems, c.hidden, residualAligned, units.residual[k]);
      }
    } else {
      for (size_t u = threadIdx.x; u < unitsPerRow && !failed; u += blockDim.x) {
        uint2 sum;
        if (!sumUnit(u, &sum)) {
          failed = 1;
          break;
        }
        residualUnit(sum, residualRow, u * kNormUnitElems, c.hidden, residualAligned, squares);
      }
    }
    if (__syncthreads_or(failed)) return;
    const float inv = inverseRms(blockSumSquares(squares, warpSums), c.hidden, c.eps);
    if (inRegisters) writeNormUnits<T, Out>(units, outRow, c.hidden, inv, &scale);
    else writeNormRow<T, Out>(residualRow, weight, outRow, c.hidden, inv, &scale);
  }
  rcnDeviceLetNextKernelIn();
  finishCall(a, call);
}

// The separate kernel's sum pointer is typed, so each input type has its own table.
using FusedKernelFn = void (*)(const OneShotArgs, const ResidualNormCall);

const decltype(&residualNormKernel<__half, __half>) kNormHalf[2] = {residualNormKernel<__half, __half>,
                                                                    residualNormKernel<__half, __nv_fp8_e4m3>};
const decltype(&residualNormKernel<__nv_bfloat16, __nv_bfloat16>) kNormBf16[2] = {
    residualNormKernel<__nv_bfloat16, __nv_bfloat16>, residualNormKernel<__nv_bfloat16, __nv_fp8_e4m3>};
const FusedKernelFn kFused[2][2] = RCN_NORM_KERNEL_TABLE(fusedNormKernel);

// The table index of a checked call: [dtype is bf16][normType is e4m3].
int typeRow(const ResidualNormCall& c) { return c.dtype == rcnBfloat16 ? 1 : 0; }
int outColumn(const ResidualNormCall& c) { return c.normType == rcnFloat8e4m3 ? 1 : 0; }

template <typename Fn, size_t N>
rcnResult_t preloadAll(Fn const (&kernels)[N]) {
  for (Fn kernel : kernels) {
    cudaFuncAttributes attributes;
    RCN_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  }
  return rcnSuccess;
}

}  // namespace

rcnResult_t launchResidualNorm(const ResidualNormCall& call, const void* sum, bool programmaticLaunch,
                               cudaStream_t stream) {
  if (call.tokens == 0) return rcnSuccess;
  OneShotGrid grid{};
  grid.blocks = static_cast<int>(std::min(call.tokens, kNormMaxBlocks));
  grid.threads = normThreads(call.hidden);
  if (typeRow(call) == 1)
    return launchKernel(kNormBf16[outColumn(call)], grid, programmaticLaunch, stream, call,
                        static_cast<const __nv_bfloat16*>(sum));
  return launchKernel(kNormHalf[outColumn(call)], grid, programmaticLaunch, stream, call,
                      static_cast<const __half*>(sum));
}

bool fusedNormFits(const ResidualNormCall& call, size_t llMaxBytes) {
  return call.hidden % kNormUnitElems == 0 && call.count() * 2 <= llMaxBytes;
}

uint32_t fusedNormSignature(const ResidualNormCall& call) {
  // Another mix than callSignature's: tokens, hidden and both types.
  const uint64_t x = (static_cast<uint64_t>(call.tokens) << 32) ^ static_cast<uint64_t>(call.hidden) ^
                     (static_cast<uint64_t>(call.dtype) << 56) ^ (static_cast<uint64_t>(call.normType) << 60);
  return static_cast<uint32_t>(mix64(x ^ 0x6e6f726d66757365ull)) & 0x7fffffffu;  // salt: "normfuse"
}

rcnResult_t launchFusedNorm(const OneShotArgs& exchange, const ResidualNormCall& call, bool programmaticLaunch,
                            cudaStream_t stream) {
  if (call.tokens == 0) return rcnSuccess;
  OneShotArgs args = exchange;
  args.send = call.send;
  args.recv = nullptr;
  args.count = call.count();
  args.signature = fusedNormSignature(call);
  OneShotGrid grid{};
  grid.protocol = OneShotProtocol::LL;
  grid.blocks = static_cast<int>(std::min<size_t>(call.tokens, static_cast<size_t>(exchange.maxBlocks)));
  grid.threads = normThreads(call.hidden);
  return launchKernel(kFused[typeRow(call)][outColumn(call)], grid, programmaticLaunch, stream, args, call);
}

rcnResult_t preloadResidualNormKernels() {
  RCN_CHECK(preloadAll(kNormHalf));
  RCN_CHECK(preloadAll(kNormBf16));
  for (const auto& row : kFused) RCN_CHECK(preloadAll(row));
  return rcnSuccess;
}

}  // namespace rcn
