// SPDX-License-Identifier: BSD-3-Clause
// rocenante-probe --rdma-check: whether the verbs wire works on this cluster
// and how fast, checked through the wire itself. For every rank pair, with
// each flag protocol (imm, the default, and the ordered opt-in), it measures
// the one-way latency of a flag (ping-pong, halved, as ib_write_lat does),
// the bandwidth of 1 MB writes (as ib_write_bw does) and runs an ordering
// stress: tagged 64-byte payloads each followed by its flag, the receiver
// counting every payload it finds stale once it saw the flag. With several
// rails (an HCA list of several devices), the default protocol is measured
// over every rail at once (striped, as the wire runs) and then over each
// rail alone. The verdict says whether the RDMA fast path will be used and
// with which protocol, or why not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/launch_env.h"
#include "transport/wire/wire.h"

namespace rcn::probe {

struct RdmaCheckOptions {
  int latencyRounds = 1000;
  size_t bandwidthBytes = 1 << 20;  // per write
  int bandwidthWrites = 32;
  int64_t orderingWrites = 1 << 20;  // per pair and protocol
  uint64_t timeoutMs = 10000;        // any one wait for a peer
};

struct RdmaPairResult {
  int from = 0, to = 0;
  std::string protocol;  // "imm" or "ordered"
  int rail = -1;         // -1: every rail at once; else that rail alone
  bool ok = false;
  std::string why;  // when !ok
  double latencyUs = 0;
  double bandwidthGBs = 0;
  int64_t writes = 0;  // ordering stress
  int64_t stale = 0;
};

struct RdmaCheckReport {
  int nranks = 0;
  std::vector<bool> rankHasPort;
  std::vector<VerbsPortSummary> ports;               // per rank: its first rail
  std::vector<std::vector<VerbsPortSummary>> rails;  // per rank: every rail
  std::vector<std::string> rankWhy;                  // per rank, when it has no port
  std::vector<std::string> wireWhy;                  // per protocol that could not connect ("" when it did)
  std::vector<std::string> railWhy;                  // per rail measured alone: "" when it connected
  std::vector<RdmaPairResult> pairs;
  bool fastPath = false;
  std::string protocol;
  std::string verdict;
};

// Collective over boot (every rank calls it with the same options); the
// report is complete on every rank. An error only when the exchange itself
// failed; an RDMA failure is part of the report.
rcnResult_t rdmaCheck(Bootstrap& boot, const RdmaCheckOptions& options, RdmaCheckReport* out);

std::string rdmaCheckText(const RdmaCheckReport& report);
std::string rdmaCheckJson(const RdmaCheckReport& report);

// The probe's --rdma-check: joins the launcher's ranks (or runs alone),
// runs the check, rank 0 prints the report. The process's exit status.
int runRdmaCheck(const rcn::LauncherInfo& launch, bool json);

}  // namespace rcn::probe
