// SPDX-License-Identifier: BSD-3-Clause
// The startup self-test and vote: run after the fast path is built, on every
// rank. Leaves comm->fast null on every rank if any rank fails or the fast
// path is slower than NCCL on small messages; lowers the one-shot threshold
// where NCCL is faster on larger ones; fills comm->info's self-test fields.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

struct rcnComm;

namespace rcn {

// reason: on entry, what was built; on return, the decision in one line.
rcnResult_t selfTestAndVote(rcnComm* comm, std::string* reason);

// After selfTestAndVote kept the fast path: the same check, vote and timing
// for each other collective the path runs and the policy routes to it
// (selftest_collectives.cc). A collective that fails or measures slower on
// any rank goes to NCCL on every rank (its threshold becomes 0) and the
// others keep the fast path; where there is no NCCL that fails creation.
// *reason gains a clause for each collective sent to NCCL.
rcnResult_t selfTestCollectives(rcnComm* comm, std::string* reason);

// Collective, before the fast path is built (its collective steps follow
// these settings): *agree when every rank has rank 0's version and
// ROCENANTE_* settings; else *why names the first rank that differs, the
// same on every rank, so all of them go without the fast path alike.
rcnResult_t compareSettings(rcnComm* comm, bool* agree, std::string* why);

// What one rank's timings say. Sizes up to kSelfTestSmallBytes (the messages
// the fast path exists for) decide on or off, by their sums; larger ones
// only where the one-shot threshold stops.
constexpr size_t kSelfTestSmallBytes = 256 * 1024;
constexpr double kSelfTestSlowerMargin = 1.10;  // timing noise allowed before a path counts as slower
struct SelfTestJudgement {
  bool slower;       // the fast path's sum over the small sizes is slower than NCCL's
  double usFast;     // sums over the small sizes, us per call
  double usNccl;
  size_t capBytes;   // the largest size before the first larger one where NCCL was faster
};
// sizes ascending, the first one small; fast[i] and nccl[i] are us per call at sizes[i].
SelfTestJudgement judgeSelfTestTimes(const std::vector<size_t>& sizes, const std::vector<double>& fast,
                                     const std::vector<double>& nccl);

// The threshold every rank takes from every rank's capBytes: the smallest,
// when it is below `largest` (the largest size timed); *capper is then the
// first rank that voted it, else -1 (no cap).
size_t selfTestAgreedCap(const std::vector<size_t>& capBytes, size_t largest, int* capper);

}  // namespace rcn
