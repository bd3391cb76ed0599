// Shared pieces of the host-backend and wire tests: forming a communicator's
// bootstrap across forked ranks, building the host path, and checking an
// all-reduce against a float64 reference on fresh random inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/dtype.h"
#include "core/fast_path.h"
#include "transport/transport.h"

namespace rcn::test {

// Joins the TCP bootstrap whose root the parent started before forking.
inline std::unique_ptr<Bootstrap> joinBootstrap(const rcnUniqueId& id, int rank, int nranks) {
  std::unique_ptr<Bootstrap> bs;
  if (bootstrapInitTcp(id, rank, nranks, &bs) != rcnSuccess) return nullptr;
  return bs;
}

inline FastPathContext hostContext(Bootstrap* bs, size_t maxBytes, uint64_t timeoutMs) {
  FastPathContext ctx;
  ctx.rank = bs->rank();
  ctx.nranks = bs->nranks();
  ctx.cudaDev = -1;
  ctx.maxBytes = maxBytes;
  ctx.timeoutMs = timeoutMs;
  ctx.bootstrap = bs;
  return ctx;
}

// ---- values ----------------------------------------------------------------

inline double loadAsDouble(const void* p, size_t i, rcnDataType_t t) {
  switch (t) {
    case rcnInt8: return static_cast<const int8_t*>(p)[i];
    case rcnUint8: return static_cast<const uint8_t*>(p)[i];
    case rcnInt32: return static_cast<const int32_t*>(p)[i];
    case rcnUint32: return static_cast<const uint32_t*>(p)[i];
    case rcnInt64: return double(static_cast<const int64_t*>(p)[i]);
    case rcnUint64: return double(static_cast<const uint64_t*>(p)[i]);
    case rcnFloat16: return __half2float(static_cast<const __half*>(p)[i]);
    case rcnFloat32: return static_cast<const float*>(p)[i];
    case rcnFloat64: return static_cast<const double*>(p)[i];
    case rcnBfloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case rcnFloat8e4m3: return float(static_cast<const __nv_fp8_e4m3*>(p)[i]);
    case rcnFloat8e5m2: return float(static_cast<const __nv_fp8_e5m2*>(p)[i]);
    default: return 0;
  }
}

inline void storeFromDouble(void* p, size_t i, rcnDataType_t t, double v) {
  switch (t) {
    case rcnInt8: static_cast<int8_t*>(p)[i] = int8_t(v); break;
    case rcnUint8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    case rcnInt32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case rcnUint32: static_cast<uint32_t*>(p)[i] = uint32_t(v); break;
    case rcnInt64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    case rcnUint64: static_cast<uint64_t*>(p)[i] = uint64_t(v); break;
    case rcnFloat16: static_cast<__half*>(p)[i] = __float2half_rn(float(v)); break;
    case rcnFloat32: static_cast<float*>(p)[i] = float(v); break;
    case rcnFloat64: static_cast<double*>(p)[i] = v; break;
    case rcnBfloat16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(float(v)); break;
    case rcnFloat8e4m3: static_cast<__nv_fp8_e4m3*>(p)[i] = __nv_fp8_e4m3(float(v)); break;
    case rcnFloat8e5m2: static_cast<__nv_fp8_e5m2*>(p)[i] = __nv_fp8_e5m2(float(v)); break;
    default: break;
  }
}

inline bool isInt(rcnDataType_t t) { return t <= rcnUint64; }
inline bool isUnsigned(rcnDataType_t t) { return t == rcnUint8 || t == rcnUint32 || t == rcnUint64; }

// Small values keep integer products and sums inside every type, so the
// float64 reference is exact for integers; floats get a few fractional bits.
inline double randomValue(std::mt19937_64& rng, rcnDataType_t t, rcnRedOp_t op) {
  if (op == rcnProd) {
    static const double kFloat[] = {0.5, 0.75, 1.0, 1.25, 1.5, 2.0};
    static const double kInt[] = {1, 2, 3};
    return isInt(t) ? kInt[rng() % 3] : kFloat[rng() % 6];
  }
  int v = int(rng() % 17);  // 0..16
  if (isInt(t)) return isUnsigned(t) ? v : v - 8;
  return (v - 8) * 0.25;
}

// The inputs of a rank are a pure function of (seed, rank), so every rank can
// compute every other rank's inputs for the reference.
inline std::vector<uint8_t> rankInput(uint64_t seed, int rank, size_t count, rcnDataType_t t,
                                      rcnRedOp_t op) {
  std::vector<uint8_t> data(count * dtypeSize(t));
  std::mt19937_64 rng(seed * 1000003 + rank);
  for (size_t i = 0; i < count; ++i) storeFromDouble(data.data(), i, t, randomValue(rng, t, op));
  return data;
}

inline double tolerance(rcnDataType_t t, int nranks) {
  switch (t) {
    case rcnFloat16: return 2e-3 * nranks;
    case rcnBfloat16: return 1.6e-2 * nranks;
    case rcnFloat8e4m3: return 0.13 * nranks;
    case rcnFloat8e5m2: return 0.26 * nranks;
    case rcnFloat32: return 1e-6 * nranks;
    case rcnFloat64: return 1e-12 * nranks;
    default: return 0;
  }
}

// Checks out against the float64 reduction of every rank's input. Returns the
// number of mismatches (printing the first few).
inline size_t checkAgainstReference(const void* out, uint64_t seed, int nranks, size_t count,
                                    rcnDataType_t t, rcnRedOp_t op, const char* label) {
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < nranks; ++r) inputs.push_back(rankInput(seed, r, count, t, op));
  size_t bad = 0;
  double tol = tolerance(t, nranks);
  for (size_t i = 0; i < count; ++i) {
    double acc = loadAsDouble(inputs[0].data(), i, t);
    for (int r = 1; r < nranks; ++r) {
      double v = loadAsDouble(inputs[r].data(), i, t);
      if (op == rcnSum || op == rcnAvg) acc += v;
      else if (op == rcnProd) acc *= v;
      else if (op == rcnMax) acc = std::max(acc, v);
      else acc = std::min(acc, v);
    }
    if (op == rcnAvg) acc = isInt(t) ? std::trunc(acc / nranks) : acc / nranks;
    double got = loadAsDouble(out, i, t);
    double scale = std::max(1.0, std::fabs(acc));
    if (!(std::fabs(got - acc) <= tol * scale)) {
      if (bad < 4)
        std::fprintf(stderr, "%s: %s %s count %zu: [%zu] got %g want %g\n", label, dtypeName(t),
                     opName(op), count, i, got, acc);
      ++bad;
    }
  }
  return bad;
}

inline uint64_t hashBytes(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace rcn::test
