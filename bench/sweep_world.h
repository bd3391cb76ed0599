// SPDX-License-Identifier: BSD-3-Clause
// The ranks of one sweep and the bootstrap they talk over (for ids, the
// agreement on each point and gathering timings to rank 0). A standalone run
// starts its local ranks here by fork/exec of itself; a launcher's ranks join
// through MASTER_ADDR:MASTER_PORT.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "sweep_launch.h"

namespace rcn::bench {

struct World {
  LaunchInfo launch;
  int rank = 0;
  int nranks = 1;
  int localRank = 0;      // this rank's index among the ranks on its host
  int localRanks = 1;     // ranks on this host
  int nnodes = 1;
  std::string hostname;
  std::unique_ptr<Bootstrap> bootstrap;
  std::vector<pid_t> children;  // standalone rank 0: the local ranks it started
};

// Joins (or, standalone, starts) the world of nprocs local ranks. argv is
// re-executed for the started ranks. On failure, why says what went wrong.
rcnResult_t joinWorld(const LaunchInfo& launch, int nprocs, char** argv, World* world, std::string* why);

// Standalone rank 0: waits (bounded) for the started ranks and reports any
// that failed. Returns false when one did.
bool reapChildren(World* world, double timeoutSec);

// Every rank's fixed-size block gathered on every rank (a thin wrapper that
// makes the bootstrap's in-place all-gather convenient).
template <typename T>
rcnResult_t gatherAll(Bootstrap* boot, const T& mine, std::vector<T>* all) {
  all->assign(boot->nranks(), T{});
  (*all)[boot->rank()] = mine;
  return boot->allGather(all->data(), sizeof(T));
}

}  // namespace rcn::bench
