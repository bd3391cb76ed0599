// SPDX-License-Identifier: BSD-3-Clause
// A bootstrap for processes started by a launcher (torchrun, mpirun, srun)
// that only agree on a rendezvous address (MASTER_ADDR:MASTER_PORT): rank 0
// makes a unique id and hands it to every rank that connects there, then all
// join the TCP bootstrap (bootstrap_tcp.cc) with it.
#pragma once

#include <memory>

#include "core/bootstrap.h"
#include "rocenante/rocenante.h"

namespace rcn {

// rank 0 listens on port (on addr's address or the chosen interface, never
// all); the others connect to addr:port (a host name or an IPv4 address),
// retrying until rank 0 is up. With ROCENANTE_BOOTSTRAP_KEY set, only ranks
// that prove the key get the id. Every wait is bounded by
// ROCENANTE_BOOTSTRAP_TIMEOUT_MS.
rcnResult_t bootstrapInitFromEnv(int rank, int nranks, const char* addr, int port,
                                 std::unique_ptr<Bootstrap>* out);

}  // namespace rcn
