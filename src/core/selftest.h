// The startup self-test and vote: run after the fast path is built, on every
// rank. Leaves comm->fast null on every rank if any rank fails or the fast
// path is slower than NCCL; fills comm->info's self-test fields.
#pragma once

#include <string>

#include "rocenante/rocenante.h"

struct rcnComm;

namespace rcn {

// reason: on entry, what was built; on return, the decision in one line.
rcnResult_t selfTestAndVote(rcnComm* comm, std::string* reason);

}  // namespace rcn
