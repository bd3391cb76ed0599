#include "sweep_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "sweep_pattern.h"

namespace rcn::bench {
namespace {

// Unit roundoff of each type: the largest relative error of one rounding.
double unitRoundoff(rcnDataType_t t) {
  switch (t) {
    case rcnBfloat16: return std::ldexp(1.0, -8);
    case rcnFloat16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

float storedAs(rcnDataType_t t, double v) {
  float f = static_cast<float>(v);
  if (t == rcnBfloat16) return bf16BitsToFloat(floatToBf16Bits(f));
  if (t == rcnFloat16) return halfBitsToFloat(floatToHalfBits(f));
  return f;
}

float loadElement(const void* data, size_t i, rcnDataType_t t) {
  if (t == rcnFloat32) {
    float f;
    std::memcpy(&f, static_cast<const char*>(data) + i * 4, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(data) + i * 2, 2);
  return t == rcnBfloat16 ? bf16BitsToFloat(bits) : halfBitsToFloat(bits);
}

}  // namespace

void computeExpected(uint64_t seed, int nranks, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                     Expected* out) {
  out->dtype = dtype;
  out->value.resize(count);
  out->tolerance.resize(count);
  double u = unitRoundoff(dtype);
  for (size_t i = 0; i < count; ++i) {
    double acc = patternValue(seed, 0, i);
    double sumAbs = std::fabs(acc);
    for (int r = 1; r < nranks; ++r) {
      double v = patternValue(seed, r, i);
      sumAbs += std::fabs(v);
      if (op == rcnMax) acc = std::max(acc, v);
      else if (op == rcnMin) acc = std::min(acc, v);
      else acc += v;
    }
    out->value[i] = storedAs(dtype, acc);
    // Each of the n-1 additions may round once, by at most u times the
    // magnitude of a partial sum, which never exceeds sumAbs; the final
    // store rounds once more. Max and min are exact.
    out->tolerance[i] = op == rcnSum ? static_cast<float>(nranks * u * sumAbs) : 0.0f;
  }
}

long long countWrong(const void* out, const Expected& expected) {
  long long wrong = 0;
  for (size_t i = 0; i < expected.value.size(); ++i) {
    float got = loadElement(out, i, expected.dtype);
    // NaN fails this comparison, so poisoned (never written) elements count.
    if (!(std::fabs(got - expected.value[i]) <= expected.tolerance[i])) ++wrong;
  }
  return wrong;
}

void fillPatternHost(void* dst, size_t count, rcnDataType_t dtype, uint64_t seed, int rank) {
  char* p = static_cast<char*>(dst);
  for (size_t i = 0; i < count; ++i) {
    float v = patternValue(seed, rank, i);
    if (dtype == rcnFloat32) {
      std::memcpy(p + i * 4, &v, 4);
    } else {
      uint16_t bits = dtype == rcnBfloat16 ? floatToBf16Bits(v) : floatToHalfBits(v);
      std::memcpy(p + i * 2, &bits, 2);
    }
  }
}

uint64_t pointSeed(size_t bytes, int method, int mode) {
  return 0x5eedull ^ (static_cast<uint64_t>(bytes) << 8) ^ (static_cast<uint64_t>(method) << 56) ^
         (static_cast<uint64_t>(mode) << 62);
}

uint16_t floatToBf16Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  uint32_t roundingBias = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

float bf16BitsToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

uint16_t floatToHalfBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  if (std::isnan(f)) return 0x7e00;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: a multiple of 2^-24, rounded to nearest even by rint.
    return sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0f, 24)));
  }
  uint32_t abits = bits & 0x7fffffff;
  uint32_t mant = abits & 0x7fffff;
  int exp = static_cast<int>(abits >> 23) - 127 + 15;
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // may carry into the exponent: correct
  return sign | static_cast<uint16_t>(half);
}

float halfBitsToFloat(uint16_t bits) {
  uint32_t sign = (bits & 0x8000u) << 16;
  int exp = (bits >> 10) & 0x1f;
  uint32_t mant = bits & 0x3ff;
  float magnitude;
  if (exp == 0) magnitude = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) magnitude = mant ? NAN : INFINITY;
  else magnitude = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  uint32_t out;
  std::memcpy(&out, &magnitude, 4);
  out |= sign;
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace rcn::bench
