// SPDX-License-Identifier: BSD-3-Clause
// NCCL tuner plugin: NCCL_TUNER_PLUGIN=librocenante.so (set automatically by
// the shim unless the user named another tuner). It applies the routing
// policy's NCCL preferences (algorithm/protocol per size) to NCCL's cost
// table for the calls NCCL keeps. A tuner can only reweight NCCL's own
// table: it never sends a call to rocenante; the shim does that.
//
// Exported as v6, v5 and v4 of NCCL's tuner ABI (plugin/tuner_abi.h); NCCL
// takes the newest it knows. Where NCCL passes its log function, our lines
// go to NCCL's log (NCCL_DEBUG, subsystem TUNING); otherwise to ours.
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "core/log.h"
#include "core/policy.h"
#include "plugin/tuner_abi.h"

namespace {

using rcn::tuner_abi::Logger;
using rcn::tuner_abi::NvlDomainInfo;

// NCCL's indices in the cost table (rows: algorithms, columns: protocols).
constexpr int kFuncAllReduce = 4;
constexpr int kAlgoTree = 0, kAlgoRing = 1;
constexpr int kProtoLL = 0, kProtoLL128 = 1, kProtoSimple = 2;
constexpr float kIgnored = -1.0f;

struct TunerContext {
  rcn::PolicyConfig policy;
  size_t nRanks = 0;
  size_t nNodes = 0;
  rcn::TopoClass topo = rcn::TopoClass::Unknown;
  Logger ncclLog = nullptr;  // NCCL's log function, where NCCL passed one
};

// One line to NCCL's log where NCCL gave us its function (NCCL filters by
// its own NCCL_DEBUG level), else to ours at the matching level.
void tunerLog(Logger ncclLog, int ncclLevel, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
void tunerLog(Logger ncclLog, int ncclLevel, const char* file, int line, const char* fmt, ...) {
  using namespace rcn::tuner_abi;
  const rcn::LogLevel ours = ncclLevel == kNcclLogWarn   ? rcn::kLogWarn
                             : ncclLevel == kNcclLogInfo ? rcn::kLogInfo
                                                         : rcn::kLogTrace;
  if (!ncclLog && !rcn::logEnabled(ours, RCN_LOG_TUNE)) return;
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (ncclLog) ncclLog(ncclLevel, kSubsysTuning, file, line, "rocenante %s", text);
  else rcn::logMessage(ours, RCN_LOG_TUNE, file, line, "%s", text);
}

#define TUNER_INFO(log, ...) tunerLog(log, rcn::tuner_abi::kNcclLogInfo, __FILE__, __LINE__, __VA_ARGS__)
#define TUNER_WARN(log, ...) tunerLog(log, rcn::tuner_abi::kNcclLogWarn, __FILE__, __LINE__, __VA_ARGS__)
#define TUNER_TRACE(log, ...) tunerLog(log, rcn::tuner_abi::kNcclLogTrace, __FILE__, __LINE__, __VA_ARGS__)

// What the tuner can tell from its inputs: one node is a single host; two or
// three nodes are all-to-all reachable on any wiring; beyond that a switch
// and a ring look the same, so the class is unknown (the policy file's
// classes.unknown section applies).
rcn::TopoClass classOf(size_t nNodes) {
  if (nNodes <= 1) return rcn::TopoClass::SingleHost;
  if (nNodes <= 3) return rcn::TopoClass::MultiNodeAnyToAny;
  return rcn::TopoClass::Unknown;
}

ncclResult_t initContext(size_t nRanks, size_t nNodes, Logger ncclLog, void** context) {
  if (!context) return ncclInvalidArgument;  // NCCL always passes one; a plugin host might not
  auto ctx = std::make_unique<TunerContext>();
  ctx->nRanks = nRanks;
  ctx->nNodes = nNodes;
  ctx->topo = classOf(nNodes);
  ctx->ncclLog = ncclLog;
  if (rcn::policyLoad(ctx->topo, rcnPathNccl, static_cast<int>(nRanks), &ctx->policy) != rcnSuccess) {
    // policyLoad named the file, line and key in our log; NCCL's gets it too.
    if (ncclLog) TUNER_WARN(ncclLog, "tuner: %s", rcn::lastErrorText());
    return ncclInvalidArgument;
  }
  TUNER_INFO(ncclLog, "tuner: %zu ranks on %zu nodes (%s), %zu NCCL preferences from %s", nRanks, nNodes,
             rcn::topoClassName(ctx->topo), ctx->policy.ncclPrefs.size(), ctx->policy.source.c_str());
  *context = ctx.release();
  return ncclSuccess;
}

int algoIndex(rcn::NcclAlgo a) {
  return a == rcn::NcclAlgo::Tree ? kAlgoTree : a == rcn::NcclAlgo::Ring ? kAlgoRing : -1;
}

int protoIndex(rcn::NcclProto p) {
  switch (p) {
    case rcn::NcclProto::LL: return kProtoLL;
    case rcn::NcclProto::LL128: return kProtoLL128;
    case rcn::NcclProto::Simple: return kProtoSimple;
    default: return -1;
  }
}

// Makes the cheapest entry matching the preference (an algorithm, a
// protocol, or both) the cheapest of the table. Entries NCCL marked as not
// applicable are never chosen; if none matches, the table is left as is.
void prefer(const TunerContext& ctx, float* table, int numAlgo, int numProto, int algo, int proto, size_t bytes) {
  int bestA = -1, bestP = -1;
  for (int a = 0; a < numAlgo; ++a) {
    if (algo >= 0 && a != algo) continue;
    for (int p = 0; p < numProto; ++p) {
      if (proto >= 0 && p != proto) continue;
      float cost = table[a * numProto + p];
      if (cost == kIgnored || cost < 0) continue;
      if (bestA < 0 || cost < table[bestA * numProto + bestP]) bestA = a, bestP = p;
    }
  }
  if (bestA < 0) {
    TUNER_TRACE(ctx.ncclLog, "tuner: %zu bytes: preferred algo %d proto %d not available", bytes, algo, proto);
    return;
  }
  table[bestA * numProto + bestP] = 0.0f;
  TUNER_TRACE(ctx.ncclLog, "tuner: %zu bytes: algo %d proto %d", bytes, bestA, bestP);
}

ncclResult_t getCollInfo(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                         int numAlgo, int numProto, int regBuff, int* nChannels) {
  auto* ctx = static_cast<TunerContext*>(context);
  if (!ctx || !collCostTable || collType != kFuncAllReduce) return ncclSuccess;
  rcn::CallDesc call;
  call.bytes = nBytes;
  call.nranks = static_cast<int>(ctx->nRanks);
  call.nnodes = static_cast<int>(ctx->nNodes);
  call.topo = ctx->topo;
  call.transport = rcnPathNccl;  // this call is NCCL's already
  rcn::RouteDecision d = rcn::policyRoute(call, ctx->policy);
  int algo = algoIndex(d.algo), proto = protoIndex(d.proto);
  if (algo < 0 && proto < 0) return ncclSuccess;  // no preference: NCCL's own choice stands
  if (algo >= numAlgo || proto >= numProto) return ncclSuccess;
  prefer(*ctx, reinterpret_cast<float*>(collCostTable), numAlgo, numProto, algo, proto, nBytes);
  return ncclSuccess;
}

ncclResult_t destroyContext(void* context) {
  delete static_cast<TunerContext*>(context);
  return ncclSuccess;
}

ncclResult_t initV4(size_t nRanks, size_t nNodes, Logger ncclLog, void** context) {
  return initContext(nRanks, nNodes, ncclLog, context);
}

ncclResult_t initV5(void** context, uint64_t, size_t nRanks, size_t nNodes, Logger ncclLog, NvlDomainInfo*, void*) {
  return initContext(nRanks, nNodes, ncclLog, context);
}

}  // namespace

// Newest first, as NCCL looks them up. v6's getChunkSize is null: NCCL's own
// chunk size stands.
extern "C" {
__attribute__((visibility("default")))
rcn::tuner_abi::TunerV6 ncclTunerPlugin_v6 = {"rocenante", initV5, getCollInfo, destroyContext, nullptr};
__attribute__((visibility("default")))
rcn::tuner_abi::TunerV5 ncclTunerPlugin_v5 = {"rocenante", initV5, getCollInfo, destroyContext};
__attribute__((visibility("default")))
rcn::tuner_abi::TunerV4 ncclTunerPlugin_v4 = {"rocenante", initV4, getCollInfo, destroyContext};
}
