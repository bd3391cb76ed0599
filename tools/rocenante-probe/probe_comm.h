// SPDX-License-Identifier: BSD-3-Clause
// rocenante-probe --comm: after the topology verdict, build a real
// communicator through the public API on every rank, run one checked
// all-reduce and report what creation decided (rcnCommQuery), so the
// prediction and the library's own choice and self-test can be compared.
#pragma once

#include <string>

#include "core/bootstrap.h"

namespace rcn::probe {

// Collective over boot (rank 0's unique id travels over it). gpu: this rank's
// device, -1 for none. *line gets one line for this rank:
//   rank R/N comm: init=ok path=P transport=T selftest=passed|no allreduce=ok reason: ...
//   rank R/N comm: init=failed (ERROR) reason: <the library's message>
// Returns an error only when the probe's own exchange or a checked all-reduce
// failed; a communicator that could not be created is a reported outcome.
rcnResult_t tryComm(Bootstrap& boot, int rank, int nranks, int gpu, std::string* line);

}  // namespace rcn::probe
