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

template <typename T, typename Out>
__global__ void __launch_bounds__(kNormMaxThreads) residualNormKernel(const ResidualNormCall c, const T* sum) {
  __shared__ float warpSums[kNormMaxWarps + 1];
  waitForPreviousKernels();
  T* residual = static_cast<T*>(c.residual);
  for (size_t row = blockIdx.x; row < c.tokens; row += gridDim.x) {
    const T* sumRow = sum + row * c.hidden;
    T* residualRow = residual + row * c.hidden;
    const bool sumAligned = alignedTo(sumRow, 8), residualAligned = alignedTo(residualRow, 8);
    float squares = 0.0f;
    for (size_t first = threadIdx.x * size_t(kNormUnitElems); first < c.hidden;
         first += size_t(blockDim.x) * kNormUnitElems)
      residualUnit(loadChunk<T, uint2>(sumRow, first, c.hidden, sumAligned), residualRow, first, c.hidden,
                   residualAligned, squares);
    const float inv = inverseRms(blockSumSquares(squares, warpSums), c.hidden, c.eps);
    writeNormRow<T, Out>(residualRow, static_cast<const T*>(c.weight), static_cast<Out*>(c.normOut) + row * c.hidden,
                         c.hidden, inv, c.normScale);
  }
}

// The one-shot LL protocol (one_shot.cu, runLL) over rows: block b puts the
// units of its rows into every peer's lines, then, row by row, waits for
// each peer's units, sums them in rank order into the dtype (rcnAllReduce's
// bits), adds the residual and normalizes the row.
template <typename T, typename Out>
__global__ void __launch_bounds__(kNormMaxThreads) fusedNormKernel(const OneShotArgs a, const ResidualNormCall c) {
  __shared__ float warpSums[kNormMaxWarps + 1];
  waitForPreviousKernels();
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
  T* residual = static_cast<T*>(c.residual);
  for (size_t row = blockIdx.x; row < c.tokens; row += gridDim.x) {
    T* residualRow = residual + row * c.hidden;
    const bool residualAligned = alignedTo(residualRow, 8);
    float squares = 0.0f;
    int failed = 0;
    for (size_t u = threadIdx.x; u < unitsPerRow; u += blockDim.x) {
      const size_t unit = row * unitsPerRow + u;
      float acc[kNormUnitElems];
      for (int r = 0; r < n && !failed; ++r) {
        uint2 d;
        if (r == me) {
          d = loadChunk<T, uint2>(send, unit * kNormUnitElems, count, sendAligned);
        } else {
          const uint4* src = linesOf(a, me, phase, r) + unit;
          const uint32_t why = waitForLine(
              src, tag, &d, [&](WaitBudget& b) { return waitCheckPeer(b, a, phase, r, /*waitingInLL=*/true); });
          if (why != kOneShotOk) {
            recordError(a, why, r, call);
            failed = 1;
            break;
          }
          storeLine(const_cast<uint4*>(src), make_uint4(0, 0, 0, 0));  // a line holds 0 or the current call
        }
        accumulate<T, OpSum>(acc, d, r == 0);
      }
      if (failed) break;
      residualUnit(finishChunk<T, OpSum, uint2>(acc, n), residualRow, u * kNormUnitElems, c.hidden, residualAligned,
                   squares);
    }
    if (__syncthreads_or(failed)) return;
    const float inv = inverseRms(blockSumSquares(squares, warpSums), c.hidden, c.eps);
    writeNormRow<T, Out>(residualRow, static_cast<const T*>(c.weight), static_cast<Out*>(c.normOut) + row * c.hidden,
                         c.hidden, inv, c.normScale);
  }
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
