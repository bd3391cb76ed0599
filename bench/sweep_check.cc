// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_check.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "sweep_pattern.h"

namespace rcn::bench {

void fillPattern(void* dst, size_t count, rcnDataType_t dtype, uint64_t seed, int rank) {
  for (size_t i = 0; i < count; ++i) rcn::test::storeElement(dst, i, dtype, patternValue(seed, rank, i));
}

void makeSizeData(uint64_t seed, int nranks, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                  bool withReference, SizeData* out) {
  out->count = count;
  out->elemBytes = dtypeSize(dtype);
  out->bytes = count * out->elemBytes;
  out->dtype = dtype;
  const size_t elements = count + kInputSets - 1;  // set s starts at element s
  out->inputs.assign(nranks, std::vector<char>(elements * out->elemBytes));
  std::vector<const void*> pointers;
  for (int r = 0; r < nranks; ++r) {
    fillPattern(out->inputs[r].data(), elements, dtype, seed, r);
    pointers.push_back(out->inputs[r].data());
  }
  out->reference = rcn::test::Reference{};
  out->expectedBits.clear();
  if (!withReference) return;
  out->reference = rcn::test::referenceAllReduce(pointers, elements, dtype, op);
  out->expectedBits.resize(elements * out->elemBytes);
  for (size_t i = 0; i < elements; ++i)
    rcn::test::storeElement(out->expectedBits.data(), i, dtype, out->reference.value[i]);
}

long long countWrong(const void* out, const SizeData& data, int set) {
  const size_t first = size_t(set);
  if (std::memcmp(out, data.expectedBits.data() + first * data.elemBytes, data.bytes) == 0) return 0;
  long long wrong = 0;
  for (size_t i = 0; i < data.count; ++i) {
    double got = rcn::test::loadElement(out, i, data.dtype);
    // NaN (or a poisoned value) fails this comparison and counts.
    if (!(std::fabs(got - data.reference.value[first + i]) <= data.reference.tolerance[first + i])) ++wrong;
  }
  return wrong;
}

uint64_t sizeSeed(size_t bytes) { return 0x5eed0000ull ^ (static_cast<uint64_t>(bytes) * 0x9e3779b97f4a7c15ull); }

}  // namespace rcn::bench
