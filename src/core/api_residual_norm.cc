// SPDX-License-Identifier: BSD-3-Clause
// The public entry point of the all-reduce fused with the residual add and
// RMSNorm: argument checks, then the communicator (core/residual_norm.cc).
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "core/comm.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/residual_norm.h"
#include "rocenante/rocenante.h"

namespace {

constexpr const char* kCaller = "rcnAllReduceResidualRmsNorm";

// Whether [a, a + aBytes) and [b, b + bBytes) share a byte.
bool overlap(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y ? y - x < aBytes : x - y < bBytes;
}

bool alignedTo(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

rcnResult_t checkTypes(const rcn::ResidualNormCall& c) {
  RCN_ARG_CHECK(c.dtype == rcnBfloat16 || c.dtype == rcnFloat16, "%s: datatype %d is not rcnBfloat16 or rcnFloat16",
                kCaller, static_cast<int>(c.dtype));
  RCN_ARG_CHECK(c.normType == c.dtype || c.normType == rcnFloat8e4m3,
                "%s: normType %d is neither the datatype (%s) nor rcnFloat8e4m3", kCaller, static_cast<int>(c.normType),
                rcn::dtypeName(c.dtype));
  RCN_ARG_CHECK(c.normType != rcnFloat8e4m3 || c.normScale != nullptr,
                "%s: normType rcnFloat8e4m3 needs normScale (a pointer to one float)", kCaller);
  RCN_ARG_CHECK(c.normType == rcnFloat8e4m3 || c.normScale == nullptr,
                "%s: normScale is given but normType is %s (it scales an rcnFloat8e4m3 output only)", kCaller,
                rcn::dtypeName(c.normType));
  RCN_ARG_CHECK(std::isfinite(c.eps) && c.eps >= 0.0f, "%s: eps=%g is not a finite value >= 0", kCaller,
                static_cast<double>(c.eps));
  return rcnSuccess;
}

rcnResult_t checkBuffers(const rcn::ResidualNormCall& c) {
  RCN_ARG_CHECK(c.hidden > 0, "%s: hidden is 0 with tokens=%zu", kCaller, c.tokens);
  RCN_ARG_CHECK(c.tokens <= SIZE_MAX / c.hidden && rcn::byteCountFits(c.tokens * c.hidden, c.dtype),
                "%s: tokens=%zu x hidden=%zu overflows a byte count", kCaller, c.tokens, c.hidden);
  RCN_ARG_CHECK(c.send && c.residual && c.weight && c.normOut,
                "%s: a buffer is NULL (sendbuff %p, residual %p, weight %p, normOut %p)", kCaller, c.send, c.residual,
                c.weight, c.normOut);
  const size_t size = rcn::dtypeSize(c.dtype);
  RCN_ARG_CHECK(alignedTo(c.send, size) && alignedTo(c.residual, size) && alignedTo(c.weight, size),
                "%s: sendbuff %p, residual %p and weight %p must be aligned to the %zu-byte %s element", kCaller,
                c.send, c.residual, c.weight, size, rcn::dtypeName(c.dtype));
  RCN_ARG_CHECK(alignedTo(c.normOut, rcn::dtypeSize(c.normType)) && alignedTo(c.normScale, sizeof(float)),
                "%s: normOut %p or normScale %p is not aligned to its element", kCaller, c.normOut,
                static_cast<const void*>(c.normScale));
  const size_t rows = c.count() * size, outRows = c.count() * rcn::dtypeSize(c.normType), weight = c.hidden * size;
  // residual and normOut are written; nothing else may share their bytes.
  RCN_ARG_CHECK(!overlap(c.residual, rows, c.send, rows) && !overlap(c.residual, rows, c.weight, weight) &&
                    !overlap(c.residual, rows, c.normOut, outRows),
                "%s: residual %p overlaps sendbuff %p, weight %p or normOut %p", kCaller, c.residual, c.send, c.weight,
                c.normOut);
  RCN_ARG_CHECK(!overlap(c.normOut, outRows, c.send, rows) && !overlap(c.normOut, outRows, c.weight, weight),
                "%s: normOut %p overlaps sendbuff %p or weight %p", kCaller, c.normOut, c.send, c.weight);
  return rcnSuccess;
}

}  // namespace

#pragma GCC visibility push(default)

extern "C" rcnResult_t rcnAllReduceResidualRmsNorm(const void* sendbuff, void* residual, const void* weight,
                                                   void* normOut, size_t tokens, size_t hidden, rcnDataType_t datatype,
                                                   rcnDataType_t normType, const float* normScale, float eps,
                                                   rcnComm_t comm, rcnStream_t stream) {
  rcn::clearLastError();
  RCN_CHECK(rcn::commCheck(comm, kCaller));
  const rcn::ResidualNormCall call =
      rcn::residualNormCall(sendbuff, residual, weight, normOut, tokens, hidden, datatype, normType, normScale, eps);
  RCN_CHECK(checkTypes(call));
  if (tokens == 0) return rcnSuccess;
  RCN_CHECK(checkBuffers(call));
  return rcn::commAllReduceResidualNorm(comm, call, reinterpret_cast<cudaStream_t>(stream));
}

#pragma GCC visibility pop
