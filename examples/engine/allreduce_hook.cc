// SPDX-License-Identifier: BSD-3-Clause
#include "allreduce_hook.h"

#include <algorithm>
#include <string>

#include "model.h"  // EngineError

namespace engine {

class LocalAllReduce::Handle : public AllReduceHook {
 public:
  Handle(LocalAllReduce* owner, int rank) : owner_(owner), rank_(rank) {}
  void sum(float* data, size_t count) override { owner_->sum(rank_, data, count); }

 private:
  LocalAllReduce* owner_;
  int rank_;
};

LocalAllReduce::LocalAllReduce(int ranks, std::chrono::milliseconds patience)
    : ranks_(ranks), patience_(patience), published_(ranks), views_(ranks, nullptr) {
  for (int r = 0; r < ranks; ++r) handles_.push_back(std::make_unique<Handle>(this, r));
}

void LocalAllReduce::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  abandoned_ = true;
  changed_.notify_all();
}

void LocalAllReduce::barrier() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (abandoned_) throw EngineError("a tensor-parallel rank left the all-reduce");
  const unsigned long mine = generation_;
  if (++arrived_ == ranks_) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return;
  }
  const bool passed = changed_.wait_for(lock, patience_, [&] { return generation_ != mine || abandoned_; });
  if (generation_ != mine) return;
  abandoned_ = true;  // the group is broken for every rank, including late ones
  changed_.notify_all();
  throw EngineError(passed ? "a tensor-parallel rank left the all-reduce"
                           : "a tensor-parallel rank did not reach the all-reduce within " +
                                 std::to_string(patience_.count()) + " ms");
}

void LocalAllReduce::combine(int rank, const void* mine, size_t bytes,
                             const std::function<void(const std::vector<const void*>&)>& with) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Refused before the copy: after an abandon another rank may still read the slot.
    if (abandoned_) throw EngineError("a tensor-parallel rank left the all-reduce");
    const char* from = static_cast<const char*>(mine);
    published_[rank].assign(from, from + bytes);
    views_[rank] = published_[rank].data();
  }
  barrier();  // every rank's copy is published
  try {
    with(views_);
  } catch (...) {
    abandon();  // the others stop at the next barrier instead of waiting out the patience
    throw;
  }
  barrier();  // nobody reads them any more
}

void LocalAllReduce::sum(int rank, float* data, size_t count) {
  if (ranks_ == 1) return;
  std::vector<float> total(count, 0.0f);
  combine(rank, data, count * sizeof(float), [&](const std::vector<const void*>& partials) {
    for (const void* p : partials)
      for (size_t i = 0; i < count; ++i) total[i] += static_cast<const float*>(p)[i];
  });
  std::copy(total.begin(), total.end(), data);
}

}  // namespace engine
