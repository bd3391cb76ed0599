// SPDX-License-Identifier: BSD-3-Clause
// A Bootstrap over an existing NCCL communicator: the shim builds rocenante's
// state over the user's communicator without opening a port of its own.
// Every exchange is an ncclAllGather on a small device buffer and a private
// stream, waited for with a bound (ROCENANTE_BOOTSTRAP_TIMEOUT_MS).
//
// Each exchange first gathers a fixed 32-byte header (sequence number and
// size) and only then the payload, so ranks that are out of step (one failed
// part-way through init) get a clear error instead of an ncclAllGather of
// mismatched sizes.
#pragma once

#include <nccl.h>

#include <memory>

#include "core/bootstrap.h"

namespace rcn {

class NcclBootstrap : public Bootstrap {
 public:
  // Further exchanges fail at once with rcnInvalidUsage. The shim closes the
  // bootstrap once the communicator is built, so nothing issues collectives
  // on the user's communicator behind the user's back afterwards (for
  // example while one thread destroys several communicators in turn).
  virtual void close() = 0;
};

// comm must be ready (not inside a group, not in progress); cudaDev is the
// communicator's device. The exchanges use the real NCCL (nccl_lib.h).
rcnResult_t bootstrapInitNccl(ncclComm_t comm, int rank, int nranks, int cudaDev,
                              std::unique_ptr<NcclBootstrap>* out);

}  // namespace rcn
