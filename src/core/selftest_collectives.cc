// SPDX-License-Identifier: BSD-3-Clause
// The startup self-test of the all-gather and the reduce-scatter (see
// selftest.h, selfTestCollectives). For each one the fast path runs and the
// policy routes calls to, on every rank and in the same order:
//   1. float32 patterns through the fast path at a few sizes up to its
//      threshold, checked bit-exactly (every size is run even after a wrong
//      result, so no peer is left waiting); every rank's verdict gathered;
//   2. where there is NCCL and nothing is forced: timed against NCCL's own
//      collective, judged as the all-reduce is (judgeSelfTestTimes), and
//      the verdicts gathered.
// A collective that fails or is slower on any rank goes to NCCL on every
// rank (its threshold becomes 0); the others keep the fast path. A fast path
// left broken (a kernel that gave up waiting) is dropped whole. Without NCCL
// a failure fails creation: the fast path is the only path.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/nccl_lib.h"
#include "core/policy.h"
#include "core/selftest.h"
#include "core/selftest_support.h"

namespace rcn {
namespace {

constexpr Collective kChecked[] = {Collective::AllGather, Collective::ReduceScatter};
constexpr size_t kLargestShare = size_t(1) << 20;  // checked and timed at most, per rank

// One rank's word on one collective.
struct CollectiveVote {
  int32_t passed;  // every size right
  int32_t broken;  // the fast path recorded an error: it is unusable for every collective
  int32_t slower;  // summed over the small sizes, slower than NCCL
  int32_t pad;
  uint64_t capBytes;
};

// Whole-buffer sizes (the policy's measure), ascending, each a whole number
// of float32 shares: a few up to the threshold and the path's share limit.
// Shares are not rounded to the kernels' 16-byte units, so their element-wise
// tails are tested too (1020 bytes over 3 ranks: 85 floats a share).
std::vector<size_t> collectiveSizes(const rcnComm* comm, Collective coll) {
  const size_t n = static_cast<size_t>(comm->nranks);
  size_t limit = std::min(comm->fast->maxShareBytes(), kLargestShare) * n;
  if (comm->policy.force <= 0) limit = std::min(limit, policyOneShotMax(comm->policy, coll, false));
  std::vector<size_t> sizes;
  for (size_t s : {size_t(1024), size_t(16384), size_t(65536), kSelfTestSmallBytes, limit}) {
    s = s / (4 * n) * (4 * n);
    if (s > 0 && s <= limit && std::find(sizes.begin(), sizes.end(), s) == sizes.end()) sizes.push_back(s);
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

// One call of `coll` over `whole` bytes of float32 through the fast path
// (count: its share in elements).
rcnResult_t fastCall(rcnComm* comm, TestBuffers& buf, Collective coll, size_t count) {
  if (coll == Collective::AllGather) return comm->fast->allGather(buf.send, buf.recv, count, rcnFloat32, buf.stream);
  return comm->fast->reduceScatter(buf.send, buf.recv, count, rcnFloat32, rcnSum, buf.stream);
}

rcnResult_t ncclCall(rcnComm* comm, TestBuffers& buf, Collective coll, size_t count) {
  const NcclApi* nccl = nullptr;
  RCN_CHECK(ncclApi(&nccl));
  if (coll == Collective::AllGather)
    RCN_NCCL_CHECK(nccl, allGather(buf.send, buf.recv, count, ncclFloat32, comm->nccl, buf.stream));
  else RCN_NCCL_CHECK(nccl, reduceScatter(buf.send, buf.recv, count, ncclFloat32, ncclSum, comm->nccl, buf.stream));
  return rcnSuccess;
}

// One call at `whole` bytes, checked bit-exactly; *why says what was wrong.
rcnResult_t checkOnce(rcnComm* comm, TestBuffers& buf, Collective coll, size_t whole, std::string* why) {
  const int n = comm->nranks, me = comm->rank;
  const size_t count = whole / static_cast<size_t>(n) / sizeof(float);
  const bool gather = coll == Collective::AllGather;
  std::vector<float> in(gather ? count : count * n), out(gather ? count * n : count);
  for (size_t i = 0; i < in.size(); ++i) in[i] = patternValue(me, i);
  RCN_CHECK(buf.upload(buf.send, in.data(), in.size() * sizeof(float)));
  std::vector<unsigned char> poison(out.size() * sizeof(float), 0xff);  // NaN in every float
  RCN_CHECK(buf.upload(buf.recv, poison.data(), poison.size()));
  RCN_CHECK(fastCall(comm, buf, coll, count));
  RCN_CHECK(buf.download(out.data(), buf.recv, out.size() * sizeof(float)));
  for (size_t i = 0; i < out.size() && why->empty(); ++i) {
    // All-gather: rank i / count's element i % count; reduce-scatter: the sum of this rank's block.
    const float want = gather ? patternValue(static_cast<int>(i / count), i % count)
                              : expectedValue(n, static_cast<size_t>(me) * count + i);
    if (std::memcmp(&out[i], &want, sizeof want) != 0)
      *why = std::string("wrong ") + collectiveName(coll) + " at " + std::to_string(whole) + " bytes: element " +
             std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " + std::to_string(want);
  }
  return rcnSuccess;
}

// Phase 1 on this rank: every size, even after a wrong one.
CollectiveVote checkCollective(rcnComm* comm, TestBuffers& buf, Collective coll, const std::vector<size_t>& sizes,
                               std::string* why) {
  CollectiveVote vote{1, 0, 0, 0, sizes.back()};
  for (size_t whole : sizes) {
    if (checkOnce(comm, buf, coll, whole, why) != rcnSuccess && why->empty())
      *why = std::string(collectiveName(coll)) + " failed at " + std::to_string(whole) + " bytes";
  }
  if (why->empty() && selfTestFailsHere(comm, coll)) *why = "failure forced by ROCENANTE_SELFTEST_FAIL_RANK";
  std::string asyncWhy;
  if (comm->fast->asyncError(&asyncWhy) != rcnSuccess) {
    vote.broken = 1;
    *why = asyncWhy;
  }
  vote.passed = why->empty();
  return vote;
}

// Phase 2: fastest batches of each path, judged as the all-reduce's are.
CollectiveVote timeCollective(rcnComm* comm, TestBuffers& buf, Collective coll, const std::vector<size_t>& sizes,
                              std::string* why) {
  CollectiveVote vote{1, 0, 0, 0, sizes.back()};
  std::vector<double> fast(sizes.size(), std::numeric_limits<double>::infinity()), ref = fast, discarded = fast;
  rcnResult_t result = rcnSuccess;
  for (std::vector<double>* round : {&discarded, &fast}) {  // the first round warms the clocks up
    for (size_t i = 0; i < sizes.size() && result == rcnSuccess; ++i) {
      const size_t count = sizes[i] / static_cast<size_t>(comm->nranks) / sizeof(float);
      result = timeFastest(
          buf, [&] { return fastCall(comm, buf, coll, count); }, &(*round)[i]);
    }
    std::string asyncWhy;
    if (result == rcnSuccess && comm->fast->asyncError(&asyncWhy) != rcnSuccess) result = rcnRemoteError;
    result = agreeEveryRankOk(comm, result);
    if (result != rcnSuccess) break;
  }
  if (result == rcnSuccess) {
    rcnResult_t ncclResult = rcnSuccess;
    for (size_t i = 0; i < sizes.size() && ncclResult == rcnSuccess; ++i) {
      const size_t count = sizes[i] / static_cast<size_t>(comm->nranks) / sizeof(float);
      ncclResult = timeFastest(
          buf, [&] { return ncclCall(comm, buf, coll, count); }, &ref[i]);
    }
    result = agreeEveryRankOk(comm, ncclResult);
  }
  if (result != rcnSuccess) {
    *why = std::string("error while timing the ") + collectiveName(coll);
    vote.passed = 0;
    vote.broken = 1;  // some rank's stream or path may be stuck: drop the whole fast path
    return vote;
  }
  const SelfTestJudgement judged = judgeSelfTestTimes(sizes, fast, ref);
  vote.slower = judged.slower;
  vote.capBytes = judged.capBytes;
  RCN_INFO(RCN_LOG_INIT, "rank %d: self-test %s: fast %.1f us, nccl %.1f us summed over sizes to %zu KB", comm->rank,
           collectiveName(coll), judged.usFast, judged.usNccl, kSelfTestSmallBytes / 1024);
  return vote;
}

// Every rank's vote on one collective.
rcnResult_t gather(rcnComm* comm, const CollectiveVote& mine, std::vector<CollectiveVote>* votes) {
  votes->assign(comm->nranks, CollectiveVote{});
  (*votes)[comm->rank] = mine;
  return comm->bootstrap->allGather(votes->data(), sizeof(CollectiveVote));
}

// The first rank whose vote fails `bad`, or -1.
template <typename Bad>
int firstRank(const std::vector<CollectiveVote>& votes, Bad bad) {
  for (size_t r = 0; r < votes.size(); ++r)
    if (bad(votes[r])) return static_cast<int>(r);
  return -1;
}

// Acts on the gathered votes: the whole path off (broken), this collective
// to NCCL (failed or slower), or its threshold capped. Without NCCL, a
// failure fails creation.
rcnResult_t applyVotes(rcnComm* comm, Collective coll, const std::vector<CollectiveVote>& votes, size_t largest,
                       std::string* reason) {
  const int broken = firstRank(votes, [](const CollectiveVote& v) { return v.broken != 0; });
  const int failed = firstRank(votes, [](const CollectiveVote& v) { return !v.passed; });
  const int slower = firstRank(votes, [](const CollectiveVote& v) { return v.slower != 0; });
  const int culprit = failed >= 0 ? failed : slower;
  if (culprit >= 0) {
    const std::string why = std::string(collectiveName(coll)) +
                            (failed >= 0 ? " self-test failed" : " slower than NCCL") + " on rank " +
                            std::to_string(culprit);
    if (!comm->nccl) {
      RCN_WARN(RCN_LOG_INIT, "rank %d/%d: %s, and there is no NCCL to fall back to", comm->rank, comm->nranks,
               why.c_str());
      return rcnInternalError;
    }
    if (broken >= 0) {
      comm->fast.reset();
      *reason = "fast path off: " + why + " (its fast path failed)";
      RCN_INFO(RCN_LOG_INIT, "rank %d/%d: rocenante off for this communicator: %s", comm->rank, comm->nranks,
               reason->c_str());
      return rcnSuccess;
    }
    policyCapOneShot(&comm->policy, coll, 0);
    *reason += "; " + why + ": NCCL takes it";
    RCN_INFO(RCN_LOG_INIT, "rank %d/%d: %s: every %s goes to NCCL", comm->rank, comm->nranks, why.c_str(),
             collectiveName(coll));
    return rcnSuccess;
  }
  std::vector<size_t> caps;
  for (const CollectiveVote& v : votes) caps.push_back(static_cast<size_t>(v.capBytes));
  int capper = -1;
  const size_t cap = selfTestAgreedCap(caps, largest, &capper);
  if (capper >= 0) {
    policyCapOneShot(&comm->policy, coll, cap);
    RCN_INFO(RCN_LOG_INIT, "rank %d/%d: %s threshold capped at %zu bytes: rank %d measured NCCL faster above",
             comm->rank, comm->nranks, collectiveName(coll), cap, capper);
  }
  return rcnSuccess;
}

}  // namespace

rcnResult_t selfTestCollectives(rcnComm* comm, std::string* reason) {
  for (Collective coll : kChecked) {
    if (!comm->fast || !comm->fast->runs(coll)) continue;
    const std::vector<size_t> sizes = collectiveSizes(comm, coll);
    if (sizes.empty()) {
      // Less than one float32 a rank is routed here: too small to test, so
      // NCCL, where there is one, takes all of this collective.
      if (comm->nccl) policyCapOneShot(&comm->policy, coll, 0);
      continue;
    }
    TestBuffers buf(comm->cudaDev >= 0);
    std::string why;
    CollectiveVote mine{0, 0, 0, 0, 0};
    if (allocateOnEveryRank(comm, buf, sizes.back()) == rcnSuccess)
      mine = checkCollective(comm, buf, coll, sizes, &why);
    else why = "the self-test's buffers could not be allocated on every rank";
    if (!mine.passed)
      RCN_WARN(RCN_LOG_INIT, "rank %d: rocenante %s self-test failed: %s", comm->rank, collectiveName(coll),
               why.c_str());
    std::vector<CollectiveVote> votes;
    RCN_CHECK(gather(comm, mine, &votes));
    const bool allPassed = firstRank(votes, [](const CollectiveVote& v) { return !v.passed; }) < 0;
    if (allPassed && comm->cudaDev >= 0 && comm->nccl && comm->policy.force <= 0) {
      mine = timeCollective(comm, buf, coll, sizes, &why);
      RCN_CHECK(gather(comm, mine, &votes));
    }
    RCN_CHECK(applyVotes(comm, coll, votes, sizes.back(), reason));
  }
  return rcnSuccess;
}

}  // namespace rcn
