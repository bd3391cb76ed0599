// SPDX-License-Identifier: BSD-3-Clause
// Whether rocenante would take a communicator's small all-reduces, and why:
// the topology class run through the same policy the library uses. The
// startup self-test and vote still have the last word at run time.
#pragma once

#include <string>

#include "topology/topology.h"

namespace rcn::probe {

struct Verdict {
  bool used = false;
  std::string path;    // "p2p", "proxy over rdma", ... "nccl", or "none" (host backend, no path)
  std::string reason;  // one line
};

Verdict verdictFor(const CommTopo& topo);

}  // namespace rcn::probe
