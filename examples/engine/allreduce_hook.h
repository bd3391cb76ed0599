// SPDX-License-Identifier: BSD-3-Clause
// The one point where tensor-parallel ranks talk: after each row-parallel
// product (attention output, MLP down) every rank holds a partial sum of the
// hidden vector and calls sum() to complete it. The CPU path runs its ranks
// as threads and sums locally; a host backend of rocenante can implement the
// same interface with rcnAllReduce on host memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace engine {

class AllReduceHook {
 public:
  virtual ~AllReduceHook() = default;
  // Sums `count` floats over all ranks, in place. Every rank calls it in the same order.
  virtual void sum(float* data, size_t count) = 0;
};

// TP = 1: nothing to sum.
class NoAllReduce : public AllReduceHook {
 public:
  void sum(float*, size_t) override {}
};

// N ranks as N threads of one process. Every rank adds the partials in rank
// order, so all ranks get bit-identical results (as the one-shot protocol does).
// Every wait is bounded: a rank that gives up (abandon) or stays away for
// `patience` makes the others' calls throw EngineError instead of hanging.
class LocalAllReduce {
 public:
  explicit LocalAllReduce(int ranks, std::chrono::milliseconds patience = std::chrono::minutes(2));
  AllReduceHook& rank(int r) { return *handles_[r]; }

  // Publishes a copy of `bytes` bytes at `mine`, waits for every rank's, calls
  // `with` on all of them in rank order, then waits until every rank has.
  // The copies belong to the group, so a rank that leaves early (an error)
  // frees nothing another rank still reads. Every rank calls it in step.
  void combine(int rank, const void* mine, size_t bytes,
               const std::function<void(const std::vector<const void*>&)>& with);
  // This rank stops taking part (it failed): every call waiting now or later throws.
  void abandon();

 private:
  class Handle;
  void sum(int rank, float* data, size_t count);
  void barrier();

  int ranks_;
  std::chrono::milliseconds patience_;
  std::vector<std::vector<char>> published_;  // each rank's copy for the call in progress
  std::vector<const void*> views_;             // published_[r].data(), what `with` gets
  std::vector<std::unique_ptr<AllReduceHook>> handles_;  // one Handle per rank
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  unsigned long generation_ = 0;
  bool abandoned_ = false;
};

}  // namespace engine
