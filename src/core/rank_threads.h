// SPDX-License-Identifier: BSD-3-Clause
// Runs the ranks of one process together, a thread each, for setups whose
// bootstrap exchanges need every rank at once (rcnCommInitAll, the NCCL
// shim's ncclCommInitAll and group creations).
#pragma once

#include <functional>
#include <string>

#include "rocenante/rocenante.h"

namespace rcn {

struct RankFailure {
  int rank = -1;  // -1: every rank succeeded
  rcnResult_t result = rcnSuccess;
  std::string cause;  // that rank's last warning
};

// Runs work(rank) for every rank in 0..nranks-1 on a thread of its own and
// waits for all. Returns the failure that caused the others: the first rank
// that failed with anything but rcnRemoteError (a peer giving up), else the
// first that failed. Where a thread cannot be started, that rank fails with
// rcnSystemError, the later ones with rcnRemoteError, and stopStarted(rank)
// is called first so that the ranks already running stop waiting for it.
RankFailure runRankThreads(int nranks, const std::function<rcnResult_t(int rank)>& work,
                           const std::function<void(int firstMissing)>& stopStarted);

}  // namespace rcn
