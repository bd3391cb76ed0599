// SPDX-License-Identifier: BSD-3-Clause
// Inputs and checks of the all-gather and reduce-scatter tests (host
// backend and GPU alike): rank r's send buffer is a pure function of
// (seed, r), so every rank rebuilds every other rank's for the reference.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "test_host_util.h"

namespace rcn::test {

// What every rank's all-gather must hold: each rank's sendCount elements in rank order.
inline std::vector<uint8_t> expectedAllGather(uint64_t seed, int nranks, size_t sendCount, rcnDataType_t t) {
  std::vector<uint8_t> whole;
  for (int r = 0; r < nranks; ++r) {
    const std::vector<uint8_t> share = rankInput(seed, r, nranks, sendCount, t, rcnSum);
    whole.insert(whole.end(), share.begin(), share.end());
  }
  return whole;
}

// 0 when got holds expectedAllGather's bytes exactly; else 1, naming the first bad element.
inline size_t checkAllGather(const void* got, uint64_t seed, int nranks, size_t sendCount, rcnDataType_t t,
                             const char* label) {
  const std::vector<uint8_t> want = expectedAllGather(seed, nranks, sendCount, t);
  if (std::memcmp(got, want.data(), want.size()) == 0) return 0;
  const size_t elem = dtypeSize(t);
  for (size_t i = 0; i < want.size() / elem; ++i)
    if (std::memcmp(static_cast<const uint8_t*>(got) + i * elem, want.data() + i * elem, elem) != 0) {
      std::fprintf(stderr, "%s: all-gather %s sendcount %zu: element %zu (rank %zu's %zu) is %g, expected %g\n", label,
                   dtypeName(t), sendCount, i, i / sendCount, i % sendCount, loadElement(got, i, t),
                   loadElement(want.data(), i, t));
      break;
    }
  return 1;
}

// Rank r's reduce-scatter input: nranks blocks of recvCount elements.
inline std::vector<uint8_t> reduceScatterInput(uint64_t seed, int r, int nranks, size_t recvCount, rcnDataType_t t,
                                               rcnRedOp_t op) {
  return rankInput(seed, r, nranks, size_t(nranks) * recvCount, t, op);
}

// 0 when got (block `block` of the reduce-scatter) matches the float64
// reference over every rank's block; else 1, naming the first bad element.
inline size_t checkReduceScatter(const void* got, uint64_t seed, int nranks, int block, size_t recvCount,
                                 rcnDataType_t t, rcnRedOp_t op, const char* label) {
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<const void*> blocks;
  for (int r = 0; r < nranks; ++r) inputs.push_back(reduceScatterInput(seed, r, nranks, recvCount, t, op));
  for (auto& in : inputs) blocks.push_back(in.data() + size_t(block) * recvCount * dtypeSize(t));
  const Reference ref = referenceAllReduce(blocks, recvCount, t, op);
  std::string why;
  if (matchesReference(got, ref, recvCount, t, &why)) return 0;
  std::fprintf(stderr, "%s: reduce-scatter %s %s recvcount %zu block %d: %s\n", label, dtypeName(t), opName(op),
               recvCount, block, why.c_str());
  return 1;
}

}  // namespace rcn::test
