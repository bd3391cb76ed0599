// SPDX-License-Identifier: BSD-3-Clause
// The in-process bootstrap of rcnCommInitAll: one thread per rank, exchanging
// through one shared buffer. An all-gather is a round: every rank deposits
// its block, the last one to arrive completes the round, every rank copies
// the blocks out, and the last reader lets the next round begin. Each wait is
// bounded by ROCENANTE_BOOTSTRAP_TIMEOUT_MS; a failure fails the whole group,
// so every rank sees an error instead of waiting for a rank that gave up.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/socket.h"

namespace rcn {

class LocalBootstrapGroup {
 public:
  explicit LocalBootstrapGroup(int nranks) : nranks_(nranks), deposited_(nranks, false) {}

  int nranks() const { return nranks_; }

  rcnResult_t allGather(int rank, void* data, size_t bytes);

  // Fails every pending and future exchange of the group.
  void abort(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    failLocked("rank " + std::to_string(rank) + " aborted the communicator");
  }

 private:
  using Lock = std::unique_lock<std::mutex>;

  void failLocked(const std::string& why) {
    if (failed_) return;
    failed_ = true;
    failure_ = why;
    changed_.notify_all();
  }
  rcnResult_t reportFailureLocked(int rank) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap(local): rank %d: %s", rank, failure_.c_str());
    return rcnRemoteError;
  }
  std::string missingRanksLocked() const {
    std::string missing;
    for (int r = 0; r < nranks_; ++r)
      if (!deposited_[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    return missing;
  }
  rcnResult_t depositLocked(int rank, const void* data, size_t bytes);

  const int nranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<char> blocks_;     // nranks_ blocks of bytes_ for the current round
  size_t bytes_ = 0;
  std::vector<bool> deposited_;  // which ranks have deposited in the current round
  int depositCount_ = 0;
  int readers_ = 0;              // ranks still copying out the completed round
  uint64_t completedRounds_ = 0;
  bool failed_ = false;
  std::string failure_;
};

rcnResult_t LocalBootstrapGroup::depositLocked(int rank, const void* data, size_t bytes) {
  if (depositCount_ == 0) {
    bytes_ = bytes;
    blocks_.assign(static_cast<size_t>(nranks_) * bytes, 0);
  } else if (bytes != bytes_) {
    failLocked("rank " + std::to_string(rank) + " all-gathers " + std::to_string(bytes) +
               " bytes per rank while others all-gather " + std::to_string(bytes_));
    return rcnInvalidUsage;
  }
  if (deposited_[rank]) {
    failLocked("rank " + std::to_string(rank) + " joined the same all-gather twice (two threads with one rank?)");
    return rcnInvalidUsage;
  }
  std::memcpy(blocks_.data() + static_cast<size_t>(rank) * bytes,
              static_cast<const char*>(data) + static_cast<size_t>(rank) * bytes, bytes);
  deposited_[rank] = true;
  ++depositCount_;
  return rcnSuccess;
}

rcnResult_t LocalBootstrapGroup::allGather(int rank, void* data, size_t bytes) {
  const int64_t timeoutMs = bootstrapTimeoutMs();
  const Deadline deadline = deadlineAfterMs(timeoutMs);
  Lock lock(mutex_);
  // The previous round's readers must finish before its buffer is reused.
  if (!changed_.wait_until(lock, deadline, [&] { return failed_ || readers_ == 0; }))
    failLocked("the previous all-gather was not read out by every rank within " + std::to_string(timeoutMs) + " ms");
  if (failed_) return reportFailureLocked(rank);

  rcnResult_t res = depositLocked(rank, data, bytes);
  if (res != rcnSuccess) {
    reportFailureLocked(rank);
    return res;
  }
  const uint64_t myRound = completedRounds_;
  if (depositCount_ == nranks_) {
    ++completedRounds_;
    readers_ = nranks_;
    depositCount_ = 0;
    std::fill(deposited_.begin(), deposited_.end(), false);
    changed_.notify_all();
  } else if (!changed_.wait_until(lock, deadline, [&] { return failed_ || completedRounds_ != myRound; })) {
    failLocked("only " + std::to_string(depositCount_) + " of " + std::to_string(nranks_) +
               " ranks reached the all-gather within " + std::to_string(timeoutMs) +
               " ms; missing ranks: " + missingRanksLocked());
  }
  if (failed_) return reportFailureLocked(rank);

  std::memcpy(data, blocks_.data(), blocks_.size());
  if (--readers_ == 0) changed_.notify_all();
  return rcnSuccess;
}

namespace {

class LocalBootstrap : public Bootstrap {
 public:
  LocalBootstrap(std::shared_ptr<LocalBootstrapGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int nranks() const override { return group_->nranks(); }
  rcnResult_t allGather(void* data, size_t bytes) override { return group_->allGather(rank_, data, bytes); }
  void abort() override { group_->abort(rank_); }

 private:
  std::shared_ptr<LocalBootstrapGroup> group_;
  int rank_;
};

}  // namespace

std::shared_ptr<LocalBootstrapGroup> makeLocalBootstrapGroup(int nranks) {
  if (nranks < 1) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap(local): a group needs at least one rank, got %d", nranks);
    return nullptr;
  }
  return std::make_shared<LocalBootstrapGroup>(nranks);
}

std::unique_ptr<Bootstrap> bootstrapInitLocal(std::shared_ptr<LocalBootstrapGroup> group, int rank) {
  if (!group || rank < 0 || rank >= group->nranks()) {
    RCN_WARN(RCN_LOG_BOOTSTRAP, "bootstrap(local): rank %d is outside the group of %d ranks", rank,
             group ? group->nranks() : 0);
    return nullptr;
  }
  return std::make_unique<LocalBootstrap>(std::move(group), rank);
}

}  // namespace rcn
