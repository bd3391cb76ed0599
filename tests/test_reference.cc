// SPDX-License-Identifier: BSD-3-Clause
// The CPU reference (tests/support/reference.h) against CUDA's own host-side
// conversions, exhaustively for the 8- and 16-bit formats, plus the
// reference's arithmetic and the one-shot grid and layout rules. CPU only.
#include <catch2/catch_test_macros.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/norm_math.h"
#include "kernels/one_shot.h"
#include "kernels/residual_norm.h"
#include "support/reference.h"

using namespace rcn;
using namespace rcn::test;

namespace {

bool sameDouble(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST_CASE("decoders match CUDA for every fp16, bf16 and fp8 pattern", "[reference]") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(bits);
    REQUIRE(sameDouble(halfToDouble(static_cast<uint16_t>(bits)), __half2float(__half(hr))));
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(bits);
    REQUIRE(sameDouble(bf16ToDouble(static_cast<uint16_t>(bits)), __bfloat162float(__nv_bfloat16(br))));
  }
  for (uint32_t bits = 0; bits < 256; ++bits) {
    __nv_fp8_e4m3 a;
    a.__x = static_cast<__nv_fp8_storage_t>(bits);
    __nv_fp8_e5m2 b;
    b.__x = static_cast<__nv_fp8_storage_t>(bits);
    REQUIRE(sameDouble(fp8e4m3ToDouble(static_cast<uint8_t>(bits)), static_cast<float>(a)));
    REQUIRE(sameDouble(fp8e5m2ToDouble(static_cast<uint8_t>(bits)), static_cast<float>(b)));
  }
}

TEST_CASE("encoders round like CUDA's float conversions", "[reference]") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-30, 20), mantissa(1, 2);
  for (int i = 0; i < 200000; ++i) {
    // Floats (so CUDA's float-input conversions see the same value), any sign and scale.
    float v = static_cast<float>((rng() & 1 ? -1 : 1) * mantissa(rng) * std::exp2(exponent(rng)));
    if (i % 7 == 0) v = static_cast<float>(static_cast<int>(rng() % 2000) - 1000) / 64.0f;  // ties
    __half h = __float2half_rn(v);
    __half_raw hr = h;
    REQUIRE(doubleToHalf(v) == hr.x);
    __nv_bfloat16 b = __float2bfloat16_rn(v);
    __nv_bfloat16_raw br = b;
    REQUIRE(doubleToBf16(v) == br.x);
    REQUIRE(doubleToFp8e4m3(v) == __nv_fp8_e4m3(v).__x);
    REQUIRE(doubleToFp8e5m2(v) == __nv_fp8_e5m2(v).__x);
  }
}

TEST_CASE("random inputs keep integer reductions exact and in range", "[reference]") {
  const rcnDataType_t ints[] = {rcnInt8, rcnUint8, rcnInt32, rcnUint32, rcnInt64, rcnUint64};
  for (rcnDataType_t t : ints) {
    for (int op = 0; op < rcnNumOps; ++op) {
      for (int n : {2, 8, 16}) {
        std::vector<std::vector<char>> in(n, std::vector<char>(1000 * 8));
        std::vector<const void*> ptrs;
        for (int r = 0; r < n; ++r) {
          fillRandom(in[r].data(), 1000, t, static_cast<rcnRedOp_t>(op), n, 100 + r);
          ptrs.push_back(in[r].data());
        }
        Reference ref = referenceAllReduce(ptrs, 1000, t, static_cast<rcnRedOp_t>(op));
        // Each exact result survives a store/load round trip through the type.
        std::vector<char> out(1000 * 8);
        for (size_t i = 0; i < 1000; ++i) storeElement(out.data(), i, t, ref.value[i]);
        std::string why;
        INFO(static_cast<int>(t) << " op " << op << " n " << n);
        REQUIRE(matchesReference(out.data(), ref, 1000, t, &why));
      }
    }
  }
}

TEST_CASE("matchesReference catches a wrong element and poison", "[reference]") {
  std::vector<float> a(16, 1.0f), b(16, 2.0f);
  Reference ref = referenceAllReduce({a.data(), b.data()}, 16, rcnFloat32, rcnSum);
  std::vector<float> got(16, 3.0f);
  std::string why;
  REQUIRE(matchesReference(got.data(), ref, 16, rcnFloat32, &why));
  got[5] = 3.001f;
  REQUIRE_FALSE(matchesReference(got.data(), ref, 16, rcnFloat32, &why));
  REQUIRE(why.find("element 5") != std::string::npos);
  poisonHost(got.data(), got.size() * sizeof(float));
  REQUIRE_FALSE(matchesReference(got.data(), ref, 16, rcnFloat32, &why));
}

TEST_CASE("one-shot grid depends on bytes only and respects the limits", "[reference][kernels]") {
  for (size_t bytes : {size_t(1), size_t(16), size_t(1000), size_t(65536), size_t(65537), size_t(262144)}) {
    OneShotGrid g = oneShotGrid(bytes, 65536, 32, 512);
    REQUIRE(g.blocks >= 1);
    REQUIRE(g.blocks <= 32);
    REQUIRE(g.threads >= 32);
    REQUIRE(g.threads <= 512);
    REQUIRE(g.threads % 32 == 0);
    REQUIRE((g.protocol == OneShotProtocol::LL) == (bytes <= 65536));
  }
  REQUIRE(oneShotGrid(262144, 0, 32, 512).blocks == 32);
  REQUIRE(oneShotGrid(1024, 0, 32, 1024).threads <= 512);
  RegionLayout L = regionLayout(16, 262144, 32, 65536);
  REQUIRE(L.slotsOffset >= 2 * 16 * 32 * sizeof(uint32_t));
  REQUIRE(L.llOffset >= L.slotsOffset + 2 * 16 * L.slotBytes);
  REQUIRE(L.totalBytes >= L.llOffset + 2 * 16 * L.llSlotBytes);
  REQUIRE(L.slotsOffset % 16 == 0);
  REQUIRE(L.slotBytes == 262144);
  REQUIRE(regionLayout(2, 262144, 32, 262144).slotBytes == 0);  // LL takes every size: no flag slots
  REQUIRE(L.llOffset % 16 == 0);
}

// The LL kernels that share the all-reduce's lines (all-gather and
// reduce-scatter: one 16-byte line per 8-byte unit of a share of at most
// llMaxBytes; the fused norm: one per 4 elements of a 16-bit row) must
// never write past a peer's slot, and every block of their grid must own a
// unit (block b's first is b * threads): odd limits, 1 byte, the largest share.
TEST_CASE("LL collectives stay inside the peer's lines and leave no block idle", "[reference][kernels]") {
  for (int nranks : {2, 8})
    for (size_t llMax : {size_t(1), size_t(13), size_t(4096), size_t(65535), size_t(65536)}) {
      const RegionLayout L = regionLayout(nranks, 262144, 32, llMax, false, 16);
      REQUIRE(L.llSlotOffset(1, nranks - 1, nranks) + L.llSlotBytes <= L.windowOffset);
      for (size_t share : {size_t(1), size_t(7), size_t(8), size_t(9), llMax / 2 + 1, llMax - 1, llMax}) {
        if (share == 0 || share > llMax) continue;
        const size_t units = (share + 7) / 8;
        REQUIRE(16 * units <= L.llSlotBytes);
        const OneShotGrid g = oneShotGrid(share, llMax, 32, 512);
        REQUIRE(g.protocol == OneShotProtocol::LL);
        REQUIRE(static_cast<size_t>(g.blocks - 1) * g.threads < units);
      }
      for (size_t hidden : {size_t(4), size_t(12), size_t(4096), size_t(8192)}) {
        ResidualNormCall call;
        call.hidden = hidden;
        call.tokens = llMax / (2 * hidden);  // the most rows that fit
        if (call.tokens == 0) {
          call.tokens = 1;
          REQUIRE_FALSE(fusedNormFits(call, llMax));
          continue;
        }
        REQUIRE(fusedNormFits(call, llMax));
        REQUIRE(16 * (call.count() / kNormUnitElems) <= L.llSlotBytes);
        ++call.tokens;
        REQUIRE_FALSE(fusedNormFits(call, llMax));
      }
    }
  for (size_t hidden : {size_t(1), size_t(5), size_t(4096), size_t(5120), size_t(16384), size_t(65536)}) {
    const int threads = normThreads(hidden);
    REQUIRE(threads % kNormWarp == 0);
    REQUIRE(threads <= kNormMaxThreads);
    REQUIRE((static_cast<size_t>(threads) * kNormUnitElems >= hidden || threads == kNormMaxThreads));
  }
}
