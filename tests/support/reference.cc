// SPDX-License-Identifier: BSD-3-Clause
#include "support/reference.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

namespace rcn::test {

namespace {

// A small binary float format: ebits exponent bits, mbits mantissa bits.
struct MiniFloat {
  int ebits;
  int mbits;
  bool hasInf;       // IEEE-style: all-ones exponent is inf/NaN
  bool saturate;     // overflow gives the largest finite value instead of inf
  double maxFinite;
  uint32_t nanBits;  // the NaN produced for NaN input

  int bias() const { return (1 << (ebits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
};

const MiniFloat kHalf{5, 10, true, false, 65504.0, 0x7E00};
const MiniFloat kBf16{8, 7, true, false, 3.38953138925153547590470800371487866880e38, 0x7FC0};
const MiniFloat kE4m3{4, 3, false, true, 448.0, 0x7F};
const MiniFloat kE5m2{5, 2, true, true, 57344.0, 0x7E};

double decode(uint32_t bits, const MiniFloat& f) {
  const uint32_t signBit = 1u << (f.ebits + f.mbits);
  const double sign = (bits & signBit) ? -1.0 : 1.0;
  const uint32_t exp = (bits >> f.mbits) & ((1u << f.ebits) - 1);
  const uint32_t mant = bits & ((1u << f.mbits) - 1);
  const uint32_t expAllOnes = (1u << f.ebits) - 1;
  if (f.hasInf && exp == expAllOnes)
    return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (!f.hasInf && exp == expAllOnes && mant == (1u << f.mbits) - 1)  // e4m3: S.1111.111 is NaN
    return std::numeric_limits<double>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), f.emin() - f.mbits);
  return sign * std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -f.mbits), static_cast<int>(exp) - f.bias());
}

uint32_t encode(double v, const MiniFloat& f) {
  const uint32_t sign = std::signbit(v) ? 1u << (f.ebits + f.mbits) : 0u;
  if (std::isnan(v)) return sign | f.nanBits;
  const uint32_t infBits = ((1u << f.ebits) - 1) << f.mbits;
  double a = std::fabs(v);
  if (a == 0) return sign;
  double m = a;
  if (!std::isinf(a)) {
    int e = 0;
    std::frexp(a, &e);  // a = x * 2^e, x in [0.5, 1)
    const int binade = std::max(e - 1, f.emin());
    const double quantum = std::ldexp(1.0, binade - f.mbits);
    m = std::nearbyint(a / quantum) * quantum;  // ties to even in the default rounding mode
  }
  if (m > f.maxFinite) {
    if (f.saturate || !f.hasInf) m = f.maxFinite;
    else return sign | infBits;
  }
  if (m < std::ldexp(1.0, f.emin()))  // subnormal
    return sign | static_cast<uint32_t>(m / std::ldexp(1.0, f.emin() - f.mbits));
  int e = 0;
  std::frexp(m, &e);
  const int binade = e - 1;
  const uint32_t mant = static_cast<uint32_t>(m / std::ldexp(1.0, binade - f.mbits)) - (1u << f.mbits);
  return sign | (static_cast<uint32_t>(binade + f.bias()) << f.mbits) | mant;
}

// Mantissa bits of the type results are stored in, and its smallest step.
void outputPrecision(rcnDataType_t t, int* mbits, double* minStep) {
  switch (t) {
    case rcnFloat16: *mbits = 10; *minStep = std::ldexp(1.0, -24); return;
    case rcnBfloat16: *mbits = 7; *minStep = std::ldexp(1.0, -133); return;
    case rcnFloat8e4m3: *mbits = 3; *minStep = std::ldexp(1.0, -9); return;
    case rcnFloat8e5m2: *mbits = 2; *minStep = std::ldexp(1.0, -16); return;
    case rcnFloat32: *mbits = 23; *minStep = std::ldexp(1.0, -149); return;
    default: *mbits = 52; *minStep = std::ldexp(1.0, -1074); return;
  }
}

// One unit in the last place of the output type at magnitude a.
double ulpAt(double a, rcnDataType_t t) {
  int mbits = 0;
  double minStep = 0;
  outputPrecision(t, &mbits, &minStep);
  if (a == 0) return minStep;
  int e = 0;
  std::frexp(a, &e);
  return std::max(std::ldexp(1.0, e - 1 - mbits), minStep);
}

// Relative error of one accumulation step on the device.
double accumulationEps(rcnDataType_t t) {
  return t == rcnFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
}

// The largest magnitude an integer input may have so that the op over nranks
// stays in range (and in double's exact range).
double integerLimit(rcnDataType_t t) {
  switch (t) {
    case rcnInt8: return 127;
    case rcnUint8: return 255;
    case rcnInt32: return 2147483647.0;
    case rcnUint32: return 4294967295.0;
    default: return std::ldexp(1.0, 50);
  }
}

bool isSigned(rcnDataType_t t) { return t != rcnUint8 && t != rcnUint32 && t != rcnUint64; }

}  // namespace

double halfToDouble(uint16_t bits) { return decode(bits, kHalf); }
uint16_t doubleToHalf(double v) { return static_cast<uint16_t>(encode(v, kHalf)); }
double bf16ToDouble(uint16_t bits) { return decode(bits, kBf16); }
uint16_t doubleToBf16(double v) { return static_cast<uint16_t>(encode(v, kBf16)); }
double fp8e4m3ToDouble(uint8_t bits) { return decode(bits, kE4m3); }
uint8_t doubleToFp8e4m3(double v) { return static_cast<uint8_t>(encode(v, kE4m3)); }
double fp8e5m2ToDouble(uint8_t bits) { return decode(bits, kE5m2); }
uint8_t doubleToFp8e5m2(double v) { return static_cast<uint8_t>(encode(v, kE5m2)); }

bool dtypeIsInteger(rcnDataType_t t) { return t <= rcnUint64; }

double loadElement(const void* buf, size_t i, rcnDataType_t t) {
  const char* p = static_cast<const char*>(buf);
  switch (t) {
    case rcnInt8: return reinterpret_cast<const int8_t*>(p)[i];
    case rcnUint8: return reinterpret_cast<const uint8_t*>(p)[i];
    case rcnInt32: return reinterpret_cast<const int32_t*>(p)[i];
    case rcnUint32: return reinterpret_cast<const uint32_t*>(p)[i];
    case rcnInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
    case rcnUint64: return static_cast<double>(reinterpret_cast<const uint64_t*>(p)[i]);
    case rcnFloat16: return halfToDouble(reinterpret_cast<const uint16_t*>(p)[i]);
    case rcnFloat32: return reinterpret_cast<const float*>(p)[i];
    case rcnFloat64: return reinterpret_cast<const double*>(p)[i];
    case rcnBfloat16: return bf16ToDouble(reinterpret_cast<const uint16_t*>(p)[i]);
    case rcnFloat8e4m3: return fp8e4m3ToDouble(reinterpret_cast<const uint8_t*>(p)[i]);
    case rcnFloat8e5m2: return fp8e5m2ToDouble(reinterpret_cast<const uint8_t*>(p)[i]);
    default: return 0;
  }
}

void storeElement(void* buf, size_t i, rcnDataType_t t, double v) {
  char* p = static_cast<char*>(buf);
  switch (t) {
    case rcnInt8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int64_t>(v)); return;
    case rcnUint8: reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<uint64_t>(v)); return;
    case rcnInt32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(static_cast<int64_t>(v)); return;
    case rcnUint32: reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(static_cast<uint64_t>(v)); return;
    case rcnInt64: reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); return;
    case rcnUint64: reinterpret_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); return;
    case rcnFloat16: reinterpret_cast<uint16_t*>(p)[i] = doubleToHalf(v); return;
    case rcnFloat32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); return;
    case rcnFloat64: reinterpret_cast<double*>(p)[i] = v; return;
    case rcnBfloat16: reinterpret_cast<uint16_t*>(p)[i] = doubleToBf16(v); return;
    case rcnFloat8e4m3: reinterpret_cast<uint8_t*>(p)[i] = doubleToFp8e4m3(v); return;
    case rcnFloat8e5m2: reinterpret_cast<uint8_t*>(p)[i] = doubleToFp8e5m2(v); return;
    default: return;
  }
}

void fillRandom(void* buf, size_t count, rcnDataType_t t, rcnRedOp_t op, int nranks, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  if (dtypeIsInteger(t)) {
    const double limit = integerLimit(t);
    double hi = limit;
    if (op == rcnSum || op == rcnAvg) hi = std::floor(limit / nranks);
    if (op == rcnProd) hi = std::max(1.0, std::floor(std::pow(limit, 1.0 / nranks) + 1e-9));
    const double lo = isSigned(t) ? -hi : 0;
    std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    for (size_t i = 0; i < count; ++i) storeElement(buf, i, t, static_cast<double>(dist(rng)));
    return;
  }
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (size_t i = 0; i < count; ++i) {
    double v = dist(rng);
    if (op == rcnProd) v = (v < 0 ? -1.0 : 1.0) * (0.75 + 0.5 * std::fabs(v));  // |v| in [0.75, 1.25]
    if (op == rcnMax || op == rcnMin) v *= 100.0;
    storeElement(buf, i, t, v);
  }
}

Reference referenceAllReduce(const std::vector<const void*>& inputs, size_t count, rcnDataType_t t,
                             rcnRedOp_t op) {
  const int n = static_cast<int>(inputs.size());
  Reference ref;
  ref.value.resize(count);
  ref.tolerance.assign(count, 0.0);
  const bool integer = dtypeIsInteger(t);
  const double eps = accumulationEps(t);
  for (size_t i = 0; i < count; ++i) {
    double acc = loadElement(inputs[0], i, t);
    double sumAbs = std::fabs(acc);
    for (int r = 1; r < n; ++r) {
      const double x = loadElement(inputs[r], i, t);
      sumAbs += std::fabs(x);
      switch (op) {
        case rcnSum: case rcnAvg: acc += x; break;
        case rcnProd: acc *= x; break;
        case rcnMax: acc = std::max(acc, x); break;
        case rcnMin: acc = std::min(acc, x); break;
        default: break;
      }
    }
    if (op == rcnAvg) {
      // Integers: C's truncating division of the exact sum.
      if (integer) acc = isSigned(t) ? static_cast<double>(static_cast<int64_t>(acc) / n)
                                     : static_cast<double>(static_cast<uint64_t>(acc) / static_cast<uint64_t>(n));
      else acc /= n;
    }
    ref.value[i] = acc;
    if (integer || op == rcnMax || op == rcnMin) continue;
    const double spread = op == rcnProd ? std::fabs(acc) : (op == rcnAvg ? sumAbs / n : sumAbs);
    ref.tolerance[i] = (n + 1) * eps * spread + ulpAt(std::fabs(acc), t);
  }
  return ref;
}

bool matchesReference(const void* got, const Reference& ref, size_t count, rcnDataType_t t,
                      std::string* why) {
  for (size_t i = 0; i < count; ++i) {
    const double g = loadElement(got, i, t);
    const double want = ref.value[i];
    const bool ok = std::isnan(want) ? std::isnan(g) : std::fabs(g - want) <= ref.tolerance[i];
    if (ok) continue;
    std::ostringstream text;
    text.precision(17);
    text << "element " << i << " of " << count << ": got " << g << ", expected " << want
         << " (tolerance " << ref.tolerance[i] << ")";
    *why = text.str();
    return false;
  }
  return true;
}

void poisonHost(void* buf, size_t bytes) { std::memset(buf, kPoisonByte, bytes); }

bool poisonDevice(void* dptr, size_t bytes) {
  return cudaMemset(dptr, kPoisonByte, bytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
}

cudaError_t copyToDevice(void* dst, const void* src, size_t bytes) {
  const cudaError_t copied = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return copied != cudaSuccess ? copied : cudaStreamSynchronize(cudaStreamLegacy);
}

}  // namespace rcn::test
