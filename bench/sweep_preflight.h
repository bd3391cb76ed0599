// SPDX-License-Identifier: BSD-3-Clause
// What the sweep checks before it starts any rank, so that a run that could
// not finish is refused at once: the output files it will write, and, on the
// host backend, the memory its local ranks will hold.
#pragma once

#include <string>

#include "sweep_options.h"

namespace rcn::bench {

// Whether the --json/--csv/--write-policy files look writable: none a
// directory, each file (or its folder) writable. The writes themselves can
// still fail later (a full disk, a FIFO no one reads).
bool outputsWritable(const SweepOptions& o, std::string* why);

// Whether this machine can run localRanks ranks of a host-backend sweep: at
// most kMaxHostRanks, and their buffers within 80 % of the memory it has
// available (MemAvailable; a cgroup limit below it is not seen); false with
// why when not.
constexpr int kMaxHostRanks = 64;  // more local ranks than a large host has cores
bool hostRanksFit(const SweepOptions& o, int localRanks, std::string* why);

}  // namespace rcn::bench
