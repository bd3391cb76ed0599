// --tp N on the GPU path: one process per GPU. The launching process makes
// the rcn unique id, starts N copies of this program with --rank r and the id,
// and waits for them. When one rank fails, the others get a grace period and
// are then killed, so a broken run never hangs.
//
// Or an external launcher (torchrun, mpirun, srun) started the ranks: then
// adoptExternalLaunch makes this process one of them and nothing is started.
#pragma once

#include <string>

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
// launcher passed. On the GPU path the device must be set first.
rcnComm_t joinComm(const EngineOptions& o, int rank);

// Starts o.tp ranks once the model is known to split over them (throws
// EngineError if not). Returns 0 when every rank exited 0, else the first
// failing rank's status (or 1).
int launchRanks(const EngineOptions& o, int argc, char** argv, const std::string& uniqueIdHex);

std::string toHex(const void* data, size_t bytes);
// Throws EngineError unless hex is exactly 2 * bytes hex digits.
void fromHex(const std::string& hex, void* data, size_t bytes);

}  // namespace engine
