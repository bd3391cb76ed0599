// SPDX-License-Identifier: BSD-3-Clause
// The routing policy: a pure function from the rank-invariant description of a
// call to a route. The native API, the shim, the tuner plugin and the sweep's
// --write-policy all use this one function. It never looks at pointers or time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn {

// The collectives rocenante can run one-shot. Bytes of a call (CallDesc)
// are what nccl-tests reports: the count times the element size for an
// all-reduce, the whole receive buffer (nranks x sendcount) of an all-gather
// and the whole send buffer (nranks x recvcount) of a reduce-scatter.
enum class Collective { AllReduce, AllGather, ReduceScatter };
constexpr int kNumCollectives = 3;
const char* collectiveName(Collective coll);  // "all-reduce", "all-gather", "reduce-scatter"

enum class Route {
  Nccl,            // stock NCCL, with preferences below
  OneShot,         // rocenante one-shot
  TwoShot,         // rocenante two-shot (when built)
};

// NCCL's own algorithm/protocol preference for calls NCCL keeps (tuner plugin).
enum class NcclAlgo { Default, Ring, Tree };
enum class NcclProto { Default, LL, LL128, Simple };

enum class TopoClass { Unknown, SingleHost, MultiNodeAnyToAny, MultiNodePartial };

// The largest one-shot threshold: the fast path's buffers are sized from it
// (ROCENANTE_MAX_BYTES's range in params.def says the same).
constexpr size_t kMaxOneShotBytes = size_t(1) << 30;

struct CallDesc {
  Collective coll = Collective::AllReduce;
  size_t bytes = 0;
  rcnDataType_t dtype = rcnFloat32;
  rcnRedOp_t op = rcnSum;
  int nranks = 0;
  int nnodes = 1;
  TopoClass topo = TopoClass::Unknown;
  rcnPath_t transport = rcnPathNccl;  // the fast path this comm built (Nccl: none)
  bool graphCapture = false;
};

struct RouteDecision {
  Route route = Route::Nccl;
  NcclAlgo algo = NcclAlgo::Default;
  NcclProto proto = NcclProto::Default;
};

// For calls NCCL keeps: up to maxBytes, prefer this algorithm/protocol.
// Entries are sorted by maxBytes; the first that covers a call applies.
struct NcclPreference {
  size_t maxBytes = 0;
  NcclAlgo algo = NcclAlgo::Default;
  NcclProto proto = NcclProto::Default;
};

// The thresholds a communicator agreed on at init (defaults, then policy file,
// then environment).
struct PolicyConfig {
  bool disabled = false;        // ROCENANTE_DISABLE
  int force = 0;                // +1 rocenante, -1 nccl, 0 none (ROCENANTE_FORCE)
  size_t oneShotMaxBytes = 0;   // ROCENANTE_MAX_BYTES
  size_t oneShotMaxBytesGraph = 0;
  size_t twoShotMaxBytes = 0;   // 0: two-shot never taken
  size_t allGatherMaxBytes = 0;      // ROCENANTE_ALLGATHER_MAX_BYTES (whole output), eager and graphs
  size_t reduceScatterMaxBytes = 0;  // ROCENANTE_REDUCESCATTER_MAX_BYTES (whole input)
  int maxRanks = 8;             // more ranks than this: NCCL (one-shot moves N-1 copies)
  std::vector<NcclPreference> ncclPrefs;
  std::string source;           // where the values came from, for logs
};

// Built-in defaults for a topology class and transport, then the policy file
// named by ROCENANTE_POLICY, then the environment. A malformed file or value
// is rcnInvalidArgument with a WARN naming the file, line and key (or the
// variable). Reads only rank-invariant inputs.
rcnResult_t policyLoad(TopoClass topo, rcnPath_t transport, int nranks, PolicyConfig* out);

// The built-in defaults of one topology class, transport and rank count (no
// file, no environment).
PolicyConfig policyDefaults(TopoClass topo, rcnPath_t transport, int nranks);

// Whether the policy sends every call to NCCL (disable, or force: nccl).
bool policySendsAllToNccl(const PolicyConfig& config);

RouteDecision policyRoute(const CallDesc& call, const PolicyConfig& config);

// The largest call of `coll` the policy sends to the one-shot (graph: in a
// CUDA graph capture); 0 where it sends none.
size_t policyOneShotMax(const PolicyConfig& config, Collective coll, bool graph);
// Lowers that threshold to `bytes` (the self-test's cap; graph and eager alike).
void policyCapOneShot(PolicyConfig* config, Collective coll, size_t bytes);

// A canonical text of every field that steers routing; hashed in the init vote.
std::string policyAgreementText(const PolicyConfig& config);

const char* routeName(Route r);
const char* topoClassName(TopoClass t);
const char* ncclAlgoName(NcclAlgo a);
const char* ncclProtoName(NcclProto p);

}  // namespace rcn
