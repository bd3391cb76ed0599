// SPDX-License-Identifier: BSD-3-Clause
// --tp N on the GPU path: one process per GPU. The launching process makes
// the rcn unique id, starts N copies of this program with --rank r, hands
// each the id through a pipe (--id-fd: argv is readable by every local user
// in /proc, and whoever holds the id can join), and waits for them. When one rank fails, the others get a grace period
// and are then killed, so a broken run never hangs. Each rank hands its error message to the launcher through a pipe
// (--error-fd), and the launcher prints each distinct one once: an error every rank hits shows once, not N times.
//
// Or an external launcher (torchrun, mpirun, srun) started the ranks: then
// adoptExternalLaunch makes this process one of them and nothing is started.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "options.h"
#include "rocenante/rocenante.h"

namespace engine {

// When launcher variables are set (rcnGetLaunchInfo) and this process is not
// a rank our own launcher started, takes rank, tp and local rank from them and
// sets externalLaunch. Leaves o alone without a launcher, or for a launch of
// one process given --tp N > 1 (the engine then starts its N ranks itself).
// Throws EngineError on wrong variables, or a --tp other than the world size.
void adoptExternalLaunch(EngineOptions& o);

// Rank `rank`'s communicator of o.tp ranks (o.tp > 1): from the launcher's
// variables under an external launch, else from the unique id our own
// launcher handed over (--id-fd). On the GPU path the device must be set first.
rcnComm_t joinComm(const EngineOptions& o, int rank);

// Starts o.tp ranks once the model is known to split over them (throws
// EngineError if not), and supervises them (superviseRanks).
int launchRanks(const EngineOptions& o, int argc, char** argv, const rcnUniqueId& id);

// A rank process launchRanks started, and the read end (non-blocking) of the
// pipe on which it hands over its error message.
struct RankProcess {
  pid_t pid = -1;
  int errorFd = -1;
};

// Waits for the ranks: prints each distinct error message they hand over once
// (as "rcn_engine: error: ..."), the first failure's exit status, and kills
// those still running 30 s after it. Returns 0 when every rank exited 0, else
// the first failing rank's status (or 1).
int superviseRanks(const std::vector<RankProcess>& ranks);

// In a process the launcher (pid `launcher`) just forked: dies with it. A
// launcher killed by its pid alone (kill, a harness's terminate()) must not
// leave its ranks generating on, re-parented to init. Exits at once when the
// launcher is already gone.
void dieWithLauncher(pid_t launcher);

// This rank's --error-fd (-1 in a process launchRanks did not start), made
// close-on-exec so that programs the rank starts do not hold it.
int claimErrorFd(const EngineOptions& o);

// The program's last word on an error: printed as "rcn_engine: error: what",
// or, in a rank that launchRanks started (errorFd = its --error-fd), written
// to the launcher, which prints it (unless another rank's was the same).
void reportError(const std::string& what, int errorFd);

}  // namespace engine
