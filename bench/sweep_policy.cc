// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_policy.h"


#include "core/dtype.h"
#include "sweep_options.h"
#include "sweep_report.h"

namespace rcn::bench {
namespace {

struct AlgoProto {
  const char* algo;
  const char* proto;
};

// The policy file's spelling of an NCCL method's settings.
AlgoProto algoProtoOf(int method) {
  const MethodSpec& m = kMethods[method];
  AlgoProto ap{"default", "default"};
  if (m.ncclAlgo) ap.algo = "ring";  // the sweep only forces Ring
  if (m.ncclProto) {
    std::string p = m.ncclProto;
    ap.proto = p == "LL" ? "ll" : p == "LL128" ? "ll128" : "simple";
  }
  return ap;
}

// The fastest of NCCL default and its Ring variants at one size, preferring
// the default unless another beats it by the margin. Symmetric windows are a
// property of the user's buffers, not a setting the policy can choose.
int preferredNccl(const SweepResults& r, Mode mode, size_t bytes) {
  int def = methodIndex(kBaselineDefault);
  const Point* base = findPoint(r, def, mode, bytes);
  int best = base && base->wrong <= 0 ? def : -1;
  double bestUs = best >= 0 ? base->us.median * (1.0 - kNcclPreferenceMargin) : 0.0;
  auto ringVariant = [def](int m) { return !kMethods[m].symmetric && m != def; };
  return fastestNcclAt(r, mode, bytes, ringVariant, best, bestUs);
}

// text on comment lines: each line break starts a new comment, so a note or
// command line of several lines cannot put a key into the file.
std::string commentText(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '\n' || c == '\r' ? std::string("\n#   ") : std::string(1, c);
  return out;
}

}  // namespace

// Why crossover c cannot be written as a threshold, or "" when it can.
std::string outsideMeasured(const Crossover& c) {
  if (!c.compared) return "";
  if (c.firstLoss == 0)
    return "rocenante won at every size measured, up to " + std::to_string(c.largestCompared) +
           " bytes: the crossover lies above (sweep larger sizes to find it)";
  if (c.winsUpTo == 0 && c.smallestCompared > kPolicyBottomBytes)
    return "rocenante lost at the smallest size measured, " + std::to_string(c.smallestCompared) +
           " bytes: smaller sizes were not measured";
  return "";
}

bool policySetsAnything(const PolicyChoice& c) {
  return (c.haveEager && c.eagerUnknown.empty()) || (c.haveGraph && c.graphUnknown.empty()) || !c.nccl.empty();
}

PolicyChoice choosePolicy(const SweepResults& r) {
  PolicyChoice c;
  int oneShot = methodIndex(kOneShot);
  Crossover graph = findCrossover(r, oneShot, Mode::Graph);
  Crossover eager = findCrossover(r, oneShot, Mode::Eager);
  c.haveGraph = graph.compared;
  c.haveEager = eager.compared;
  c.oneShotMaxBytesGraph = graph.winsUpTo;
  c.oneShotMaxBytes = eager.winsUpTo;
  c.graphUnknown = outsideMeasured(graph);
  c.eagerUnknown = outsideMeasured(eager);

  Mode mode = c.haveGraph ? Mode::Graph : Mode::Eager;
  for (size_t bytes : resultSizes(r)) {
    int m = preferredNccl(r, mode, bytes);
    if (m < 0) continue;
    AlgoProto ap = algoProtoOf(m);
    if (!c.nccl.empty() && std::string(c.nccl.back().algo) == ap.algo &&
        std::string(c.nccl.back().proto) == ap.proto)
      c.nccl.back().maxBytes = bytes;  // extend the run
    else
      c.nccl.push_back({bytes, ap.algo, ap.proto});
  }
  // Only worth writing when some run is not NCCL's own default choice.
  bool anyOverride = false;
  for (const auto& n : c.nccl) anyOverride |= std::string(n.algo) != "default" || std::string(n.proto) != "default";
  if (!anyOverride) c.nccl.clear();
  return c;
}

std::string policyYaml(const SweepResults& r, const PolicyChoice& c, const std::string& topoClass) {
  std::string y = "# rocenante routing policy written by allreduce_sweep --write-policy\n";
  y += "# measured: " + std::to_string(r.nranks) + " ranks, " + r.backend + " backend, " +
       dtypeShortName(r.dtype) + " " + opName(r.op) + "\n";
  for (const auto& kv : r.meta) y += "# " + kv.first + ": " + commentText(kv.second) + "\n";
  y += "# one_shot_max_bytes*: largest size at which rocenante one-shot beat the fastest NCCL method\n";
  y += "# at that size and every smaller one (0: it lost from the smallest sizes on); a crossover\n";
  y += "# outside the sizes measured is left out, and the library's built-in threshold stays.\n";
  y += "version: 1\nclasses:\n  " + topoClass + ":" + (policySetsAnything(c) ? "\n" : " {}\n");
  auto threshold = [&](const char* key, bool have, const std::string& unknown, size_t bytes, const char* mode) {
    if (!have) return std::string("    # ") + key + ": not measured (no " + mode + " result to compare with NCCL)\n";
    if (!unknown.empty()) return std::string("    # ") + key + ": not written, the built-in threshold stays: " +
                                 commentText(unknown) + "\n";
    return std::string("    ") + key + ": " + std::to_string(bytes) + "\n";
  };
  y += threshold("one_shot_max_bytes", c.haveEager, c.eagerUnknown, c.oneShotMaxBytes, "eager");
  y += threshold("one_shot_max_bytes_graph", c.haveGraph, c.graphUnknown, c.oneShotMaxBytesGraph, "graph");
  if (!c.nccl.empty()) {
    y += "    # NCCL settings that beat NCCL's default by at least " +
         std::to_string(static_cast<int>(kNcclPreferenceMargin * 100)) + "% up to max_bytes\n";
    y += "    nccl:\n";
    for (const auto& n : c.nccl)
      y += "      - {max_bytes: " + std::to_string(n.maxBytes) + ", algo: " + n.algo + ", proto: " +
           n.proto + "}\n";
  }
  return y;
}

}  // namespace rcn::bench
