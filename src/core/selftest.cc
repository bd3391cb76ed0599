// SPDX-License-Identifier: BSD-3-Clause
// The startup self-test and vote (see selftest.h). Order of work on every rank:
//   1. hash the routing config and gather the hashes: any difference turns
//      the fast path off everywhere (ranks would otherwise route differently);
//   2. run known-pattern float32 sums through the fast path at a few sizes,
//      check them bit-exactly, and gather every rank's verdict;
//   3. only if every rank passed: time them against NCCL on the same comm
//      (one round each, the fast path's after a discarded warm-up round) and
//      gather again. One failure or one "slower" (summed over the sizes up
//      to 256 KB, the messages the fast path exists for) turns the fast path
//      off on every rank; above 256 KB the one-shot threshold is capped,
//      alike on every rank, below the first size where some rank measured
//      NCCL faster.
// A local failure in step 2 never returns early: the rank still votes, so no
// peer is left waiting in the exchange. Where there is no NCCL (the host
// backend, ROCENANTE_NATIVE_NCCL=0) a failed vote fails creation instead: the
// fast path is the only path, and there is nothing to time it against.
#include "core/selftest.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/cuda_poll.h"
#include "core/device_memory.h"
#include "core/nccl_lib.h"
#include "core/params.h"
#include "core/selftest_support.h"

namespace rcn {
namespace {

struct Vote {
  int32_t passed;   // correctness held
  int32_t slower;   // fast path measured slower than NCCL (summed over small sizes)
  float usFast;
  float usNccl;
  uint64_t capBytes;  // the largest tested size up to which the fast path held its own
};

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// What every rank must share before anything is built.
std::string settingsText() { return "version=" + std::to_string(ROCENANTE_VERSION_CODE) + ";" + paramAgreementText(); }

// And once the fast path is built: the policy agreed and the path itself.
std::string configText(const rcnComm* comm) {
  return settingsText() + policyAgreementText(comm->policy) + "transport=" + comm->fast->transportName() +
         ";pathMax=" + std::to_string(comm->fast->maxBytes()) + ";";
}

// The sizes checked and timed, ascending: a few up to the largest the policy
// routes here, at most kSelfTestMaxBytes (a forced host path has no limit of
// its own: SIZE_MAX).
constexpr size_t kSelfTestMaxBytes = size_t(64) << 20;

std::vector<size_t> testSizes(const rcnComm* comm) {
  size_t limit = std::min(comm->fast->maxBytes(), kSelfTestMaxBytes);
  if (comm->policy.force <= 0)
    limit = std::min(limit, std::max(comm->policy.oneShotMaxBytes, comm->policy.oneShotMaxBytesGraph));
  std::vector<size_t> sizes;
  for (size_t s : {size_t(256), size_t(8192), size_t(65536), kSelfTestSmallBytes, size_t(1) << 20, limit}) {
    s = s / 16 * 16;
    if (s >= 16 && s <= limit && std::find(sizes.begin(), sizes.end(), s) == sizes.end())
      sizes.push_back(s);
  }
  return sizes;
}

// One all-reduce of `bytes` through the fast path, checked bit-exactly.
rcnResult_t checkOnce(rcnComm* comm, TestBuffers& buf, size_t bytes, std::string* why) {
  size_t count = bytes / sizeof(float);
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = patternValue(comm->rank, i);
  RCN_CHECK(buf.upload(buf.send, host.data(), bytes));
  std::vector<unsigned char> poison(bytes, 0xff);  // NaN in every float
  RCN_CHECK(buf.upload(buf.recv, poison.data(), bytes));
  RCN_CHECK(comm->fast->allReduce(buf.send, buf.recv, count, rcnFloat32, rcnSum, buf.stream));
  RCN_CHECK(buf.download(host.data(), buf.recv, bytes));
  std::string asyncWhy;
  if (comm->fast->asyncError(&asyncWhy) != rcnSuccess) {
    *why = "asynchronous error at " + std::to_string(bytes) + " bytes: " + asyncWhy;
    return rcnRemoteError;
  }
  for (size_t i = 0; i < count; ++i) {
    float want = expectedValue(comm->nranks, i);
    if (memcmp(&host[i], &want, sizeof(float)) != 0) {
      *why = "wrong result at " + std::to_string(bytes) + " bytes: element " + std::to_string(i) +
             " is " + std::to_string(host[i]) + ", expected " + std::to_string(want);
      return rcnInternalError;
    }
  }
  return rcnSuccess;
}

// Times `callFor(count)` at every size into us[i] (us per call, its fastest
// batch; sizes not reached keep their value). `result` is this rank's state
// going in; the first error ends the round and is returned.
template <typename CallFor>
rcnResult_t timeSizes(TestBuffers& buf, const std::vector<size_t>& sizes, rcnResult_t result, CallFor callFor,
                      std::vector<double>* us) {
  for (size_t i = 0; i < sizes.size() && result == rcnSuccess; ++i) {
    const size_t count = sizes[i] / sizeof(float);
    result = timeFastest(buf, [&] { return callFor(count); }, &(*us)[i]);
  }
  return result;
}

// One round of fast-path timings (timeSizes), then the agreement. `result`
// is this rank's state going in (an error skips the timing, not the
// agreement). A kernel that gave up waiting makes the later ones return at
// once, which would time as fast: the path's sticky error is checked first.
rcnResult_t timeFastRound(rcnComm* comm, TestBuffers& buf, const std::vector<size_t>& sizes, rcnResult_t result,
                          std::vector<double>* fast) {
  result = timeSizes(buf, sizes, result, [&](size_t count) {
    return comm->fast->allReduce(buf.send, buf.recv, count, rcnFloat32, rcnSum, buf.stream);
  }, fast);
  std::string why;
  if (result == rcnSuccess && comm->fast->asyncError(&why) != rcnSuccess) {
    RCN_WARN(RCN_LOG_INIT, "self-test: the fast path failed while timed: %s", why.c_str());
    result = rcnRemoteError;
  }
  return agreeEveryRankOk(comm, result);
}

// Each size's fastest batch on each path (us per call), each path timed in
// one round, the fast path's after a discarded round of the same calls: the
// first round after the idle spell before creation may run while the GPU's
// clocks still ramp up, and timed it turned the fast path off at random
// (2x H200: 50.2 us against NCCL's 33.5 us, where 17-22 us is usual). One
// timed round each, so neither path gets more tries at a fast batch. Every
// step ends with an agreement, so no rank moves on while a peer stopped.
rcnResult_t timePaths(rcnComm* comm, TestBuffers& buf, const std::vector<size_t>& sizes, std::vector<double>* fast,
                      std::vector<double>* ref) {
  const NcclApi* nccl = nullptr;
  std::vector<double> discarded(sizes.size(), std::numeric_limits<double>::infinity());
  fast->assign(sizes.size(), std::numeric_limits<double>::infinity());
  ref->assign(sizes.size(), std::numeric_limits<double>::infinity());
  RCN_CHECK(timeFastRound(comm, buf, sizes, ncclApi(&nccl), &discarded));
  RCN_CHECK(timeFastRound(comm, buf, sizes, rcnSuccess, fast));
  const rcnResult_t ncclResult = timeSizes(buf, sizes, rcnSuccess, [&](size_t count) -> rcnResult_t {
    RCN_NCCL_CHECK(nccl, allReduce(buf.send, buf.recv, count, ncclFloat32, ncclSum, comm->nccl, buf.stream));
    return rcnSuccess;
  }, ref);
  RCN_CHECK(agreeEveryRankOk(comm, ncclResult));
  for (size_t i = 0; i < sizes.size(); ++i)
    RCN_TRACE_LOG(RCN_LOG_INIT, "self-test %zu bytes: fast %.2f us (discarded round %.2f), nccl %.2f us", sizes[i],
                  (*fast)[i], discarded[i], (*ref)[i]);
  return rcnSuccess;
}

// Phase 1 on this rank: every size checked bit-exactly. Every rank issues the
// same calls; a rank whose check fails stops early, and a peer still
// exchanging with it times out (bounded by ROCENANTE_TIMEOUT_MS) and fails too.
bool checkCorrectness(rcnComm* comm, TestBuffers& buf, const std::vector<size_t>& sizes,
                      std::string* why) {
  rcnResult_t res = sizes.empty() ? rcnSuccess : allocateOnEveryRank(comm, buf, sizes.back());
  for (size_t i = 0; res == rcnSuccess && i < sizes.size(); ++i) res = checkOnce(comm, buf, sizes[i], why);
  if (res != rcnSuccess) {
    if (why->empty()) *why = std::string("error ") + rcnGetErrorString(res) + " during the check";
    return false;
  }
  if (selfTestFailsHere(comm, Collective::AllReduce)) {
    *why = "failure forced by ROCENANTE_SELFTEST_FAIL_RANK";
    return false;
  }
  return true;
}

// Phase 2, run only when every rank passed phase 1, so every rank issues the
// same NCCL calls (a rank skipping them would leave NCCL waiting unbounded).
Vote timeAgainstNccl(rcnComm* comm, TestBuffers& buf, const std::vector<size_t>& sizes, std::string* why) {
  Vote vote{1, 0, 0.f, 0.f, sizes.back()};
  std::vector<double> fast, ref;
  if (timePaths(comm, buf, sizes, &fast, &ref) != rcnSuccess) {
    *why = "error while timing";
    vote.passed = 0;
    return vote;
  }
  const SelfTestJudgement judged = judgeSelfTestTimes(sizes, fast, ref);
  vote.slower = judged.slower;
  vote.usFast = static_cast<float>(judged.usFast);
  vote.usNccl = static_cast<float>(judged.usNccl);
  vote.capBytes = judged.capBytes;
  if (comm->policy.force > 0) {  // forced: the measurements are reported, never acted on
    vote.slower = 0;
    vote.capBytes = sizes.back();
  }
  return vote;
}

// Lowers the one-shot thresholds to the smallest cap any rank voted (below
// `largest`, the largest size timed), so every rank routes alike; says so at INFO.
void applyCap(rcnComm* comm, const std::vector<Vote>& votes, size_t largest) {
  std::vector<size_t> caps;
  for (const Vote& v : votes) caps.push_back(static_cast<size_t>(v.capBytes));
  int capper = -1;
  const size_t cap = selfTestAgreedCap(caps, largest, &capper);
  if (capper < 0) return;
  PolicyConfig& policy = comm->policy;
  policy.oneShotMaxBytes = std::min<size_t>(policy.oneShotMaxBytes, cap);
  policy.oneShotMaxBytesGraph = std::min<size_t>(policy.oneShotMaxBytesGraph, cap);
  RCN_INFO(RCN_LOG_INIT, "rank %d/%d: one-shot threshold capped at %zu bytes: rank %d measured NCCL faster at the "
           "next size timed", comm->rank, comm->nranks, cap, capper);
}

// Gathers every rank's vote; true when the fast path stays on.
rcnResult_t gatherVotes(rcnComm* comm, const Vote& mine, std::vector<Vote>* votes) {
  votes->assign(comm->nranks, Vote{});
  (*votes)[comm->rank] = mine;
  return comm->bootstrap->allGather(votes->data(), sizeof(Vote));
}

// Gathers every rank's hash of `text`; *agree unless a rank's differs from
// rank 0's, which *why names (`what`: what the text holds), with a WARN.
rcnResult_t compareTexts(rcnComm* comm, const std::string& text, const char* what, bool* agree,
                         std::string* why) {
  std::vector<uint64_t> hashes(comm->nranks);
  hashes[comm->rank] = fnv1a(text);
  RCN_CHECK(comm->bootstrap->allGather(hashes.data(), sizeof(uint64_t)));
  *agree = true;
  for (int r = 1; r < comm->nranks && *agree; ++r) {
    if (hashes[r] == hashes[0]) continue;
    *agree = false;
    *why = "configuration differs between rank 0 and rank " + std::to_string(r) + " (" + what +
           "); set them alike on every rank";
  }
  if (!*agree) RCN_WARN(RCN_LOG_INIT, "rank %d: %s. This rank's: %s", comm->rank, why->c_str(), text.c_str());
  return rcnSuccess;
}

rcnResult_t compareConfig(rcnComm* comm, bool* agree, std::string* why) {
  return compareTexts(comm, configText(comm), "version, ROCENANTE_* variables or policy file", agree, why);
}

std::string describeVotes(const std::vector<Vote>& votes, bool* keep) {
  *keep = true;
  for (size_t r = 0; r < votes.size(); ++r) {
    if (!votes[r].passed) {
      *keep = false;
      return "self-test failed on rank " + std::to_string(r);
    }
  }
  for (size_t r = 0; r < votes.size(); ++r) {
    if (votes[r].slower) {
      *keep = false;
      char text[160];
      snprintf(text, sizeof text, "fast path slower than NCCL on rank %zu (%.1f us vs %.1f us)", r,
               votes[r].usFast, votes[r].usNccl);
      return text;
    }
  }
  return "self-test passed on every rank";
}

// Falls back to NCCL on every rank, or fails creation where there is no NCCL
// (the host backend, ROCENANTE_NATIVE_NCCL=0): then the fast path is the only path. noFallback is
// what that failure returns: rcnInvalidUsage when the ranks' settings
// differ (theirs to mend), rcnInternalError when the self-test failed.
rcnResult_t turnOff(rcnComm* comm, const std::string& why, std::string* reason,
                    rcnResult_t noFallback = rcnInternalError) {
  if (!comm->nccl) {
    RCN_WARN(RCN_LOG_INIT, "rank %d/%d: %s, and there is no NCCL to fall back to", comm->rank,
             comm->nranks, why.c_str());
    return noFallback;
  }
  comm->fast.reset();
  *reason = "fast path off: " + why;
  RCN_INFO(RCN_LOG_INIT, "rank %d/%d: rocenante off for this communicator, all-reduces go to NCCL: %s",
           comm->rank, comm->nranks, why.c_str());
  return rcnSuccess;
}

}  // namespace

SelfTestJudgement judgeSelfTestTimes(const std::vector<size_t>& sizes, const std::vector<double>& fast,
                                     const std::vector<double>& nccl) {
  SelfTestJudgement j{false, 0, 0, sizes.empty() ? 0 : sizes.back()};
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= kSelfTestSmallBytes) {
      j.usFast += fast[i];
      j.usNccl += nccl[i];
    } else if (fast[i] > nccl[i] * kSelfTestSlowerMargin) {
      j.capBytes = i > 0 ? sizes[i - 1] : 0;
      break;
    }
  }
  j.slower = j.usFast > j.usNccl * kSelfTestSlowerMargin;
  return j;
}

size_t selfTestAgreedCap(const std::vector<size_t>& capBytes, size_t largest, int* capper) {
  size_t cap = largest;
  *capper = -1;
  for (size_t r = 0; r < capBytes.size(); ++r)
    if (capBytes[r] < cap) cap = capBytes[r], *capper = static_cast<int>(r);
  return cap;
}

rcnResult_t compareSettings(rcnComm* comm, bool* agree, std::string* why) {
  return compareTexts(comm, settingsText(), "version or ROCENANTE_* variables", agree, why);
}

rcnResult_t selfTestAndVote(rcnComm* comm, std::string* reason) {
  comm->info.selfTestPassed = 0;
  comm->info.selfTestUsFast = comm->info.selfTestUsNccl = 0;
  if (!comm->fast) return rcnSuccess;
  bool agree = false;
  std::string why;
  RCN_CHECK(compareConfig(comm, &agree, &why));
  if (!agree) return turnOff(comm, why, reason, rcnInvalidUsage);
  if (!paramBool(ParamId::SelfTest)) {
    *reason += "; self-test skipped (ROCENANTE_SELFTEST=0)";
    return rcnSuccess;
  }
  std::vector<size_t> sizes = testSizes(comm);
  TestBuffers buf(comm->cudaDev >= 0);
  Vote mine{1, 0, 0.f, 0.f, 0};  // capBytes counts only in the timing vote
  mine.passed = checkCorrectness(comm, buf, sizes, &why);
  if (!mine.passed) RCN_WARN(RCN_LOG_INIT, "rank %d: rocenante self-test failed: %s", comm->rank, why.c_str());
  std::vector<Vote> votes;
  RCN_CHECK(gatherVotes(comm, mine, &votes));
  bool keep = false;
  std::string verdict = describeVotes(votes, &keep);
  if (!keep) return turnOff(comm, verdict, reason);
  if (comm->cudaDev >= 0 && comm->nccl && !sizes.empty()) {  // the host backend: correctness only
    mine = timeAgainstNccl(comm, buf, sizes, &why);
    if (!mine.passed) RCN_WARN(RCN_LOG_INIT, "rank %d: rocenante self-test failed: %s", comm->rank, why.c_str());
    RCN_CHECK(gatherVotes(comm, mine, &votes));
    verdict = describeVotes(votes, &keep);
    comm->info.selfTestUsFast = mine.usFast;
    comm->info.selfTestUsNccl = mine.usNccl;
    if (!keep) return turnOff(comm, verdict, reason);
    applyCap(comm, votes, sizes.back());
  }
  RCN_CHECK(selfTestCollectives(comm, reason));
  if (!comm->fast) return rcnSuccess;  // a collective's self-test left the path broken
  comm->info.selfTestPassed = 1;
  char text[160];
  if (mine.usNccl > 0)
    snprintf(text, sizeof text, "; %s (fast %.1f us, nccl %.1f us summed over sizes to %zu KB)", verdict.c_str(),
             mine.usFast, mine.usNccl, kSelfTestSmallBytes / 1024);
  else
    snprintf(text, sizeof text, "; %s (correctness only: no NCCL to time against)", verdict.c_str());
  *reason += text;
  RCN_INFO(RCN_LOG_INIT, "rank %d/%d: rocenante on: %s", comm->rank, comm->nranks, reason->c_str());
  return rcnSuccess;
}

}  // namespace rcn
