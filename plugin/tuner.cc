// NCCL tuner plugin: NCCL_TUNER_PLUGIN=librocenante.so (set automatically by
// the shim unless the user named another tuner). It applies the routing
// policy's NCCL preferences (algorithm/protocol per size) to NCCL's cost
// table for the calls NCCL keeps. A tuner can only reweight NCCL's own
// table: it never sends a call to rocenante; the shim does that.
//
// The structs below are our own definitions of NCCL's tuner ABI, laid out as
// NCCL's ext-tuner headers describe: v5 (NCCL 2.28) and v4 (NCCL 2.27).
#include <nccl.h>

#include <cstdint>
#include <memory>

#include "core/log.h"
#include "core/policy.h"

namespace {

typedef void (*NcclLogger)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

typedef ncclResult_t (*GetCollInfoFn)(void* context, int collType, size_t nBytes, int numPipeOps,
                                      float** collCostTable, int numAlgo, int numProto, int regBuff,
                                      int* nChannels);

struct TunerV4 {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, NcclLogger logFunction, void** context);
  GetCollInfoFn getCollInfo;
  ncclResult_t (*destroy)(void* context);
};

struct NvlDomainInfoV5 {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};

struct TunerV5 {
  const char* name;
  // constants points at NCCL's latency/bandwidth constants; we leave them alone.
  ncclResult_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                       NcclLogger logFunction, NvlDomainInfoV5* nvlDomainInfo, void* constants);
  GetCollInfoFn getCollInfo;
  ncclResult_t (*finalize)(void* context);
};

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
};

// What the tuner can tell from its inputs: one node is a single host; two or
// three nodes are all-to-all reachable on any wiring; beyond that a switch
// and a ring look the same, so the class is unknown (the policy file's
// classes.unknown section applies).
rcn::TopoClass classOf(size_t nNodes) {
  if (nNodes <= 1) return rcn::TopoClass::SingleHost;
  if (nNodes <= 3) return rcn::TopoClass::MultiNodeAnyToAny;
  return rcn::TopoClass::Unknown;
}

ncclResult_t initContext(size_t nRanks, size_t nNodes, void** context) {
  if (!context) return ncclInvalidArgument;  // NCCL always passes one; a plugin host might not
  auto ctx = std::make_unique<TunerContext>();
  ctx->nRanks = nRanks;
  ctx->nNodes = nNodes;
  ctx->topo = classOf(nNodes);
  if (rcn::policyLoad(ctx->topo, rcnPathNccl, static_cast<int>(nRanks), &ctx->policy) != rcnSuccess)
    return ncclInvalidArgument;  // policyLoad named the file, line and key
  RCN_INFO(RCN_LOG_TUNE, "tuner: %zu ranks on %zu nodes (%s), %zu NCCL preferences from %s", nRanks,
           nNodes, rcn::topoClassName(ctx->topo), ctx->policy.ncclPrefs.size(),
           ctx->policy.source.c_str());
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
void prefer(float* table, int numAlgo, int numProto, int algo, int proto, size_t bytes) {
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
    RCN_TRACE_LOG(RCN_LOG_TUNE, "tuner: %zu bytes: preferred algo %d proto %d not available", bytes, algo, proto);
    return;
  }
  table[bestA * numProto + bestP] = 0.0f;
  RCN_TRACE_LOG(RCN_LOG_TUNE, "tuner: %zu bytes: algo %d proto %d", bytes, bestA, bestP);
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
  prefer(reinterpret_cast<float*>(collCostTable), numAlgo, numProto, algo, proto, nBytes);
  return ncclSuccess;
}

ncclResult_t destroyContext(void* context) {
  delete static_cast<TunerContext*>(context);
  return ncclSuccess;
}

ncclResult_t initV4(size_t nRanks, size_t nNodes, NcclLogger, void** context) {
  return initContext(nRanks, nNodes, context);
}

ncclResult_t initV5(void** context, uint64_t, size_t nRanks, size_t nNodes, NcclLogger, NvlDomainInfoV5*,
                    void*) {
  return initContext(nRanks, nNodes, context);
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) TunerV5 ncclTunerPlugin_v5 = {"rocenante", initV5, getCollInfo,
                                                                     destroyContext};
__attribute__((visibility("default"))) TunerV4 ncclTunerPlugin_v4 = {"rocenante", initV4, getCollInfo,
                                                                     destroyContext};
}
