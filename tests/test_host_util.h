// SPDX-License-Identifier: BSD-3-Clause
// Shared pieces of the host-backend and wire tests: forming a communicator's
// bootstrap across forked ranks, building the host path, and checking an
// all-reduce against a float64 reference on fresh random inputs.
#pragma once

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
#include "support/reference.h"
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

// ---- inputs and checks (tests/support/reference.h) --------------------------

// A rank's inputs are a pure function of (seed, rank), so every rank can
// rebuild every other rank's inputs for the reference.
inline uint64_t rankSeed(uint64_t seed, int rank) { return seed * 1000003 + uint64_t(rank); }

inline std::vector<uint8_t> rankInput(uint64_t seed, int rank, int nranks, size_t count,
                                      rcnDataType_t t, rcnRedOp_t op) {
  std::vector<uint8_t> data(count * dtypeSize(t));
  fillRandom(data.data(), count, t, op, nranks, rankSeed(seed, rank));
  return data;
}

// Checks out against the float64 reference of every rank's inputs. Returns
// the number of mismatching buffers (0 or 1), printing the first bad element.
inline size_t checkAgainstReference(const void* out, uint64_t seed, int nranks, size_t count,
                                    rcnDataType_t t, rcnRedOp_t op, const char* label) {
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<const void*> pointers;
  for (int r = 0; r < nranks; ++r) inputs.push_back(rankInput(seed, r, nranks, count, t, op));
  for (auto& in : inputs) pointers.push_back(in.data());
  Reference ref = referenceAllReduce(pointers, count, t, op);
  std::string why;
  if (matchesReference(out, ref, count, t, &why)) return 0;
  std::fprintf(stderr, "%s: %s %s count %zu: %s\n", label, dtypeName(t), opName(op), count, why.c_str());
  return 1;
}

inline uint64_t hashBytes(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace rcn::test
