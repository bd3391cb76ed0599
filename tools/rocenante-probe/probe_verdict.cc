// SPDX-License-Identifier: BSD-3-Clause
#include "probe_verdict.h"

#include "core/params.h"
#include "core/policy.h"

namespace rcn::probe {

// The fast path comm creation would try for this picture.
static rcnPath_t likelyPath(const CommTopo& topo, std::string* name) {
  if (paramStr(ParamId::Backend) == "host") {
    *name = "host backend (ROCENANTE_BACKEND=host)";
    return rcnPathHost;
  }
  for (const RankTopo& t : topo.ranks)
    if (t.cudaDev < 0) {
      *name = "host backend (rank " + std::to_string(t.rank) + " has no GPU)";
      return rcnPathHost;
    }
  if (topo.cls == TopoClass::SingleHost && topo.p2pEligible) {
    *name = "p2p (GPUs store into each other's memory)";
    return rcnPathP2p;
  }
  if (topo.cls == TopoClass::SingleHost) *name = "proxy over shared memory (no peer access)";
  else *name = "proxy over " + (topo.wire.empty() ? std::string("a wire") : topo.wire);
  return rcnPathProxy;
}

// Without a GPU there is no NCCL, and no policy either: the host path takes
// every call where comm creation builds it (src/core/comm.cc), and creation
// fails where it does not.
static Verdict hostVerdict(const CommTopo& topo, const std::string& pathName) {
  Verdict v;
  v.path = "none";
  std::string transport;
  const bool autoTransport = paramChoice(ParamId::Transport, &transport) == rcnSuccess && transport == "auto";
  const char* noNccl = "without a GPU there is no NCCL to fall back to, so creating a communicator fails";
  if (paramBool(ParamId::Disable)) {
    v.reason = std::string("ROCENANTE_DISABLE is set; ") + noNccl;
  } else if (topo.cls == TopoClass::MultiNodePartial && autoTransport) {
    v.reason = topo.reason + "; " + noNccl +
               " (ROCENANTE_TRANSPORT=host takes the host path anyway)";
  } else {
    v.used = true;
    v.path = pathName;
    v.reason = "every all-reduce takes the " + pathName + " path; the startup self-test checks it";
  }
  return v;
}

Verdict verdictFor(const CommTopo& topo) {
  Verdict v;
  int nranks = static_cast<int>(topo.ranks.size());
  std::string pathName;
  rcnPath_t path = likelyPath(topo, &pathName);
  if (path == rcnPathHost) return hostVerdict(topo, pathName);
  PolicyConfig config;
  if (policyLoad(topo.cls, path, nranks, &config) != rcnSuccess) {
    v.reason = "the policy (ROCENANTE_POLICY / environment) did not load; see the warning above";
    v.path = "nccl";
    return v;
  }
  // A typical decode all-reduce: 32 KiB of bf16.
  CallDesc call;
  call.bytes = 32 * 1024;
  call.dtype = rcnBfloat16;
  call.nranks = nranks;
  call.nnodes = topo.nnodes;
  call.topo = topo.cls;
  call.transport = path;
  RouteDecision d = policyRoute(call, config);
  v.used = d.route != Route::Nccl;
  v.path = v.used ? pathName : "nccl";
  if (v.used) {
    v.reason = "a 32 KiB all-reduce takes the " + pathName + " path; the startup self-test and vote confirm it";
  } else if (nranks < 2) {
    v.reason = "one rank: nothing to exchange";
  } else if (config.disabled) {
    v.reason = "ROCENANTE_DISABLE is set";
  } else if (config.force < 0) {
    v.reason = "ROCENANTE_FORCE=nccl";
  } else if (topo.cls == TopoClass::MultiNodePartial) {
    v.reason = topo.reason + "; NCCL (its ring) takes every call";
  } else if (nranks > config.maxRanks) {
    v.reason = std::to_string(nranks) + " ranks is more than the policy's " + std::to_string(config.maxRanks);
  } else {
    v.reason = "the policy routes a 32 KiB all-reduce to NCCL (" + config.source + ")";
  }
  return v;
}

}  // namespace rcn::probe
