// SPDX-License-Identifier: BSD-3-Clause
#include "core/policy.h"

#include <algorithm>
#include <sstream>

#include "core/check.h"
#include "core/log.h"
#include "core/params.h"
#include "core/policy_file.h"

namespace rcn {
namespace {

// Where a one-shot pays off, per topology class (docs/POLICY.md says why).
// Single host: NCCL's best small-message graph time is ~6-9 us up to 256 KB
// on NVLink; one-shot moves N-1 copies, so bandwidth takes over above that.
// Multi-node any-to-any over RoCE: every NCCL step costs a wire round trip,
// so one-shot keeps winning to ~1 MB. Partial (4+ node physical ring): no
// all-to-all possible, NCCL's ring with LL/LL128 is the right tool.
// Two ranks over peer memory are the exception on one host: each rank sends
// its whole input once, as the ring does, so the one-shot keeps its latency
// lead until its kernel's own bandwidth gives out (4 MB on 2x H200, where it
// took 27.7 us against 30.8 for NCCL's best; it lost from 16 MB). The
// self-test caps the threshold lower on a machine where NCCL measures faster.
constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

// The environment on top of everything else: ROCENANTE_DISABLE,
// ROCENANTE_FORCE, ROCENANTE_MAX_BYTES. Malformed values are errors here.
rcnResult_t applyEnvironment(PolicyConfig* config) {
  bool set = false, disabled = false;
  RCN_CHECK(paramBoolIfSet(ParamId::Disable, &set, &disabled));
  if (set) {
    config->disabled = disabled;
    config->source += " + env DISABLE";
  }
  std::string force;  // empty, or only spaces, reads as unset: the policy's own force stays
  RCN_CHECK(paramChoice(ParamId::Force, &force));
  if (!force.empty()) {
    if (force == "rocenante") config->force = 1;
    else if (force == "nccl") config->force = -1;
    else config->force = 0;
    config->source += " + env FORCE";
  }
  int64_t maxBytes = 0;  // its row's range (0..1G) bounds the buffers sized from it
  RCN_CHECK(paramIntIfSet(ParamId::MaxBytes, &set, &maxBytes));
  if (set) {
    config->oneShotMaxBytes = config->oneShotMaxBytesGraph = static_cast<size_t>(maxBytes);
    config->source += " + env MAX_BYTES";
  }
  RCN_CHECK(paramIntIfSet(ParamId::AllGatherMaxBytes, &set, &maxBytes));
  if (set) {
    config->allGatherMaxBytes = static_cast<size_t>(maxBytes);
    config->source += " + env ALLGATHER_MAX_BYTES";
  }
  RCN_CHECK(paramIntIfSet(ParamId::ReduceScatterMaxBytes, &set, &maxBytes));
  if (set) {
    config->reduceScatterMaxBytes = static_cast<size_t>(maxBytes);
    config->source += " + env REDUCESCATTER_MAX_BYTES";
  }
  return rcnSuccess;
}

rcnResult_t applyFile(TopoClass topo, PolicyConfig* config) {
  std::string path = paramStr(ParamId::Policy);
  if (path.empty()) return rcnSuccess;
  PolicyFile file;
  std::string error;
  rcnResult_t result = policyFileLoad(path, &file, &error);
  if (result != rcnSuccess) return result;  // policyFileLoad logged file:line: key
  if (file.disable) config->disabled = *file.disable;
  if (file.force) config->force = *file.force;
  policyApplyOverrides(file.all, config);
  auto own = file.perClass.find(topo);
  if (own != file.perClass.end()) policyApplyOverrides(own->second, config);
  config->source += " + file " + path;
  return rcnSuccess;
}

const NcclPreference* preferenceFor(const PolicyConfig& config, size_t bytes) {
  for (const NcclPreference& p : config.ncclPrefs)
    if (bytes <= p.maxBytes) return &p;
  return nullptr;
}

}  // namespace

PolicyConfig policyDefaults(TopoClass topo, rcnPath_t transport, int nranks) {
  PolicyConfig c;
  c.maxRanks = 8;
  switch (topo) {
    case TopoClass::SingleHost:
      c.oneShotMaxBytes = c.oneShotMaxBytesGraph = transport == rcnPathP2p && nranks == 2 ? 4 * kMiB : 256 * kKiB;
      break;
    case TopoClass::MultiNodeAnyToAny:
      c.oneShotMaxBytes = c.oneShotMaxBytesGraph = 1 * kMiB;
      break;
    case TopoClass::MultiNodePartial:
      c.oneShotMaxBytes = c.oneShotMaxBytesGraph = 0;
      c.ncclPrefs = {{64 * kKiB, NcclAlgo::Ring, NcclProto::LL},
                     {1 * kMiB, NcclAlgo::Ring, NcclProto::LL128}};
      break;
    case TopoClass::Unknown:
      c.oneShotMaxBytes = c.oneShotMaxBytesGraph = 256 * kKiB;
      break;
  }
  // All-gather and reduce-scatter: the one-shot moves each rank's share to
  // every peer, as NCCL's ring does, in one step instead of N-1; their
  // thresholds count the whole buffer, so 256 KB keeps each rank's share
  // within the exchange slots the all-reduce threshold sizes.
  const size_t shared = std::min<size_t>(c.oneShotMaxBytes, 256 * kKiB);
  c.allGatherMaxBytes = c.reduceScatterMaxBytes = shared;
  c.source = std::string("defaults(") + topoClassName(topo) + ")";
  return c;
}

rcnResult_t policyLoad(TopoClass topo, rcnPath_t transport, int nranks, PolicyConfig* out) {
  PolicyConfig config = policyDefaults(topo, transport, nranks);
  rcnResult_t result = applyFile(topo, &config);
  if (result == rcnSuccess) result = applyEnvironment(&config);
  if (result != rcnSuccess) return result;
  *out = config;
  RCN_TRACE_LOG(RCN_LOG_TUNE, "policy for %d ranks, %s, transport %d: %s", nranks,
                topoClassName(topo), static_cast<int>(transport), policyAgreementText(config).c_str());
  return rcnSuccess;
}

bool policySendsAllToNccl(const PolicyConfig& config) { return config.disabled || config.force < 0; }

RouteDecision policyRoute(const CallDesc& call, const PolicyConfig& config) {
  RouteDecision d;
  if (const NcclPreference* pref = preferenceFor(config, call.bytes)) {
    d.algo = pref->algo;
    d.proto = pref->proto;
  }
  bool eligible = !policySendsAllToNccl(config) && call.transport != rcnPathNccl && call.nranks >= 2 && call.bytes > 0;
  if (!eligible) return d;
  if (config.force > 0) {
    d.route = Route::OneShot;  // the caller still checks the path's capacity
    return d;
  }
  if (call.nranks > config.maxRanks || call.topo == TopoClass::MultiNodePartial) return d;
  if (call.bytes <= policyOneShotMax(config, call.coll, call.graphCapture)) d.route = Route::OneShot;
  else if (call.coll == Collective::AllReduce && call.bytes <= config.twoShotMaxBytes) d.route = Route::TwoShot;
  return d;
}

size_t policyOneShotMax(const PolicyConfig& config, Collective coll, bool graph) {
  switch (coll) {
    case Collective::AllGather: return config.allGatherMaxBytes;
    case Collective::ReduceScatter: return config.reduceScatterMaxBytes;
    default: return graph ? config.oneShotMaxBytesGraph : config.oneShotMaxBytes;
  }
}

void policyCapOneShot(PolicyConfig* config, Collective coll, size_t bytes) {
  switch (coll) {
    case Collective::AllGather: config->allGatherMaxBytes = std::min(config->allGatherMaxBytes, bytes); break;
    case Collective::ReduceScatter:
      config->reduceScatterMaxBytes = std::min(config->reduceScatterMaxBytes, bytes);
      break;
    default:
      config->oneShotMaxBytes = std::min(config->oneShotMaxBytes, bytes);
      config->oneShotMaxBytesGraph = std::min(config->oneShotMaxBytesGraph, bytes);
  }
}

const char* collectiveName(Collective coll) {
  switch (coll) {
    case Collective::AllGather: return "all-gather";
    case Collective::ReduceScatter: return "reduce-scatter";
    default: return "all-reduce";
  }
}

std::string policyAgreementText(const PolicyConfig& c) {
  std::ostringstream text;
  text << "disabled=" << c.disabled << ";force=" << c.force << ";oneShot=" << c.oneShotMaxBytes
       << ";oneShotGraph=" << c.oneShotMaxBytesGraph << ";twoShot=" << c.twoShotMaxBytes
       << ";allGather=" << c.allGatherMaxBytes << ";reduceScatter=" << c.reduceScatterMaxBytes
       << ";maxRanks=" << c.maxRanks << ";nccl=";
  for (const NcclPreference& p : c.ncclPrefs)
    text << p.maxBytes << ':' << ncclAlgoName(p.algo) << '/' << ncclProtoName(p.proto) << ',';
  text << ';';
  return text.str();
}

const char* routeName(Route r) {
  switch (r) {
    case Route::OneShot: return "one-shot";
    case Route::TwoShot: return "two-shot";
    default: return "nccl";
  }
}

const char* topoClassName(TopoClass t) {
  switch (t) {
    case TopoClass::SingleHost: return "single_host";
    case TopoClass::MultiNodeAnyToAny: return "multi_node_any_to_any";
    case TopoClass::MultiNodePartial: return "multi_node_partial";
    default: return "unknown";
  }
}

const char* ncclAlgoName(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::Ring: return "ring";
    case NcclAlgo::Tree: return "tree";
    default: return "default";
  }
}

const char* ncclProtoName(NcclProto p) {
  switch (p) {
    case NcclProto::LL: return "ll";
    case NcclProto::LL128: return "ll128";
    case NcclProto::Simple: return "simple";
    default: return "default";
  }
}

}  // namespace rcn
