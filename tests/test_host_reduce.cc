// SPDX-License-Identifier: BSD-3-Clause
// The host backend's reduction against CUDA's own host conversions: for random
// bit patterns a and b of every 16- and 8-bit float type, hostReduce's a + b
// and (a + b) / 2 (fp32 accumulation) must give exactly the bits CUDA's
// encoder gives for the same float, NaNs aside. Averages land on rounding
// ties, subnormal ones included.
#include <catch2/catch_test_macros.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "transport/host/host_reduce.h"

using namespace rcn;

namespace {

template <typename T, typename Bits>
void checkSumsAgainstCuda(rcnDataType_t dtype, float (*toFloat)(T), T (*fromFloat)(float)) {
  const size_t n = 1 << 20;
  std::mt19937_64 rng(11);
  std::vector<Bits> a(n), b(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = Bits(rng());
    b[i] = Bits(i < 65536 ? 0 : rng());  // the first values: every pattern plus zero
    if (i < 65536 && sizeof(Bits) == 2) a[i] = Bits(i);
  }
  const void* inputs[2] = {a.data(), b.data()};
  for (rcnRedOp_t op : {rcnSum, rcnAvg}) {
    hostReduce(inputs, 2, out.data(), n, dtype, op);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      T x, y;
      std::memcpy(&x, &a[i], sizeof x);
      std::memcpy(&y, &b[i], sizeof y);
      float sum = toFloat(x) + toFloat(y);
      if (op == rcnAvg) sum = sum / 2.0f;
      T want = fromFloat(sum);
      Bits wantBits;
      std::memcpy(&wantBits, &want, sizeof wantBits);
      T got;
      std::memcpy(&got, &out[i], sizeof got);
      bool bothNan = std::isnan(sum) && std::isnan(toFloat(got));
      if (wantBits != out[i] && !bothNan && bad++ < 3)
        UNSCOPED_INFO("pattern " << unsigned(a[i]) << " + " << unsigned(b[i]) << ": want "
                                 << unsigned(wantBits) << " got " << unsigned(out[i]));
    }
    CHECK(bad == 0);
  }
}

float halfToFloat(__half v) { return __half2float(v); }
__half floatToHalf(float v) { return __float2half_rn(v); }
float bf16ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__nv_bfloat16 floatToBf16(float v) { return __float2bfloat16_rn(v); }
float e4m3ToFloat(__nv_fp8_e4m3 v) { return float(v); }
__nv_fp8_e4m3 floatToE4m3(float v) { return __nv_fp8_e4m3(v); }
float e5m2ToFloat(__nv_fp8_e5m2 v) { return float(v); }
__nv_fp8_e5m2 floatToE5m2(float v) { return __nv_fp8_e5m2(v); }

}  // namespace

TEST_CASE("host reduction of fp16 matches CUDA's conversions bit for bit", "[host]") {
  checkSumsAgainstCuda<__half, uint16_t>(rcnFloat16, halfToFloat, floatToHalf);
}
TEST_CASE("host reduction of bf16 matches CUDA's conversions bit for bit", "[host]") {
  checkSumsAgainstCuda<__nv_bfloat16, uint16_t>(rcnBfloat16, bf16ToFloat, floatToBf16);
}
TEST_CASE("host reduction of fp8 e4m3 matches CUDA's conversions bit for bit", "[host]") {
  checkSumsAgainstCuda<__nv_fp8_e4m3, uint8_t>(rcnFloat8e4m3, e4m3ToFloat, floatToE4m3);
}
TEST_CASE("host reduction of fp8 e5m2 matches CUDA's conversions bit for bit", "[host]") {
  checkSumsAgainstCuda<__nv_fp8_e5m2, uint8_t>(rcnFloat8e5m2, e5m2ToFloat, floatToE5m2);
}
