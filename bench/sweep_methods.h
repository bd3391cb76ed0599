// SPDX-License-Identifier: BSD-3-Clause
// The communicators the sweep times, behind one small interface: rocenante
// forced onto its fast path, rocenante with its own policy, and NCCL with
// each algorithm/protocol setting and with symmetric windows. Each is created
// collectively on every rank; when one cannot be created on some rank, it is
// unavailable everywhere, with the reason.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"
#include "sweep_methods_list.h"
#include "sweep_options.h"
#include "sweep_world.h"

namespace rcn::bench {

// The buffers every method runs on: one send and one receive pool.
struct Pools {
  void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;
  bool host = false;             // host backend: plain host memory
  bool ncclMemAlloc = false;     // from ncclMemAlloc (symmetric windows need it)
  std::string allocNote;         // why ncclMemAlloc was not used, if so
};

class SweepMethod {
 public:
  explicit SweepMethod(int index) : index_(index) {}
  virtual ~SweepMethod() = default;
  int index() const { return index_; }
  // Enqueues one all-reduce on the stream (device) or runs it (host).
  virtual bool allReduce(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                         cudaStream_t stream, std::string* why) = 0;
  // Largest message this method takes as itself (the forced one-shot stops
  // at its slot size); larger points are n/a.
  virtual size_t maxBytes() const { return ~static_cast<size_t>(0); }
  // One line for the results' metadata (path, thresholds, self-test).
  virtual std::string describe() const { return ""; }

 private:
  int index_;
};

struct MethodSet {
  std::vector<std::unique_ptr<SweepMethod>> byIndex;  // kNumMethods entries, null when unavailable
  std::vector<std::string> unavailable;               // kNumMethods reasons (empty when available)
};

// Creates the selected methods on every rank (collective over world). Rank 0
// makes every id and shares it over the world's bootstrap.
// Fails (with why) only when the ranks cannot talk; a method that cannot be
// made is recorded in out->unavailable instead.
rcnResult_t createMethods(const SweepOptions& opts, World* world, bool gpu, Pools* pools, MethodSet* out,
                          std::string* why);

// Destroys communicators and deregisters windows (before the pools are freed).
void destroyMethods(MethodSet* set);

// Allocates (ncclMemAlloc, else cudaMalloc; host memory on the host backend)
// and frees the pools.
rcnResult_t allocPools(size_t bytes, bool gpu, Pools* pools, std::string* why);
void freePools(Pools* pools);

}  // namespace rcn::bench
