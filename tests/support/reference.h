// SPDX-License-Identifier: BSD-3-Clause
// The CPU reference every all-reduce test (and the benchmark's check) uses:
// host conversions for every rocenante data type (written here from the bit
// layouts, independent of CUDA's), random inputs that cannot overflow for a
// given op and rank count, a float64 (exact for integers) reduction with a
// per-element tolerance, and poison helpers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn::test {

// ---- host conversions ------------------------------------------------------
// Encoders round to nearest even. fp16 and bf16 overflow to infinity (like
// __float2half_rn); fp8 saturates to the largest finite value (like
// __nv_fp8_e4m3(float) / __nv_fp8_e5m2(float)).
double halfToDouble(uint16_t bits);
uint16_t doubleToHalf(double v);
double bf16ToDouble(uint16_t bits);
uint16_t doubleToBf16(double v);
double fp8e4m3ToDouble(uint8_t bits);
uint8_t doubleToFp8e4m3(double v);
double fp8e5m2ToDouble(uint8_t bits);
uint8_t doubleToFp8e5m2(double v);

// Element i of a buffer of dtype, as a double (exact for every type here
// except 64-bit integers beyond 2^53, which fillRandom never produces).
double loadElement(const void* buf, size_t i, rcnDataType_t dtype);
// Stores v rounded to dtype (integers: truncated toward zero).
void storeElement(void* buf, size_t i, rcnDataType_t dtype, double v);

bool dtypeIsInteger(rcnDataType_t dtype);

// ---- inputs ----------------------------------------------------------------
// Fills count elements with values that keep the reduction over nranks ranks
// in range (no integer overflow, no float overflow) and exactly representable.
void fillRandom(void* buf, size_t count, rcnDataType_t dtype, rcnRedOp_t op, int nranks, uint64_t seed);

// ---- reference -------------------------------------------------------------
struct Reference {
  std::vector<double> value;      // exact (integers) or float64 result
  std::vector<double> tolerance;  // 0 for integers, max/min
};

// inputs[r] holds rank r's count elements.
Reference referenceAllReduce(const std::vector<const void*>& inputs, size_t count,
                             rcnDataType_t dtype, rcnRedOp_t op);

// True when every element of got is within tolerance of ref; otherwise *why
// names the first bad element, its value and the expected one.
bool matchesReference(const void* got, const Reference& ref, size_t count, rcnDataType_t dtype,
                      std::string* why);

// ---- poison ----------------------------------------------------------------
// Outputs are filled with this byte before each run: a pattern no correct
// result of fillRandom's inputs produces.
constexpr uint8_t kPoisonByte = 0xA7;
void poisonHost(void* buf, size_t bytes);
// Fills a device buffer with kPoisonByte and waits for the device, so a
// kernel on a non-blocking stream (which does not wait for the legacy
// stream's cudaMemset or cudaMemcpy) finds the poison and every input copied
// before; false on a CUDA error.
bool poisonDevice(void* dptr, size_t bytes);
// cudaMemcpy from host memory, then a wait for the legacy stream alone: from
// pageable memory that copy may return before its last bytes land, and a
// kernel on a non-blocking stream does not wait for them. A peer's kernel
// running on the same GPU does not hold the wait up.
cudaError_t copyToDevice(void* dst, const void* src, size_t bytes);

}  // namespace rcn::test
