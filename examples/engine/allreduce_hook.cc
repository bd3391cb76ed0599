#include "allreduce_hook.h"

#include <algorithm>

namespace engine {

class LocalAllReduce::Handle : public AllReduceHook {
 public:
  Handle(LocalAllReduce* owner, int rank) : owner_(owner), rank_(rank) {}
  void sum(float* data, size_t count) override { owner_->sum(rank_, data, count); }

 private:
  LocalAllReduce* owner_;
  int rank_;
};

LocalAllReduce::LocalAllReduce(int ranks) : ranks_(ranks), partials_(ranks, nullptr) {
  for (int r = 0; r < ranks; ++r) handles_.push_back(std::make_unique<Handle>(this, r));
}

void LocalAllReduce::barrier() {
  std::unique_lock<std::mutex> lock(mutex_);
  const unsigned long mine = generation_;
  if (++arrived_ == ranks_) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return;
  }
  changed_.wait(lock, [&] { return generation_ != mine; });
}

void LocalAllReduce::sum(int rank, float* data, size_t count) {
  if (ranks_ == 1) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    partials_[rank] = data;
  }
  barrier();  // every partial is published
  std::vector<float> total(count, 0.0f);
  for (int r = 0; r < ranks_; ++r)
    for (size_t i = 0; i < count; ++i) total[i] += partials_[r][i];
  barrier();  // nobody reads the partials any more
  std::copy(total.begin(), total.end(), data);
}

}  // namespace engine
