// SPDX-License-Identifier: BSD-3-Clause
#include "core/policy_file.h"

#include <algorithm>
#include <vector>

#include "core/user_file.h"
#include "core/bootstrap.h"
#include "core/log.h"
#include "core/params.h"

#ifdef ROCENANTE_HAVE_YAML
#include "core/yaml_strict.h"
#endif

namespace rcn {

void policyApplyOverrides(const PolicyOverrides& o, PolicyConfig* config) {
  if (o.oneShotMaxBytes) config->oneShotMaxBytes = *o.oneShotMaxBytes;
  if (o.oneShotMaxBytesGraph) config->oneShotMaxBytesGraph = *o.oneShotMaxBytesGraph;
  if (o.twoShotMaxBytes) config->twoShotMaxBytes = *o.twoShotMaxBytes;
  if (o.allGatherMaxBytes) config->allGatherMaxBytes = *o.allGatherMaxBytes;
  if (o.reduceScatterMaxBytes) config->reduceScatterMaxBytes = *o.reduceScatterMaxBytes;
  if (o.maxRanks) config->maxRanks = *o.maxRanks;
  if (o.ncclPrefs) config->ncclPrefs = *o.ncclPrefs;
}

rcnResult_t policyFileLoad(const std::string& path, PolicyFile* out, std::string* error) {
  std::string text, why;
  if (!readConfigFile(path, &text, &why)) {
    *error = "cannot read the policy file (ROCENANTE_POLICY) " + why;
    RCN_WARN(RCN_LOG_INIT, "%s", error->c_str());
    return rcnInvalidArgument;
  }
  return policyFileParse(text, path, out, error);
}

#ifndef ROCENANTE_HAVE_YAML

rcnResult_t policyFileParse(const std::string&, const std::string& name, PolicyFile*,
                            std::string* error) {
  *error = name + ": rocenante was built without yaml-cpp, so it cannot read a policy file; "
                  "rebuild with yaml-cpp installed or unset ROCENANTE_POLICY";
  RCN_WARN(RCN_LOG_INIT, "%s", error->c_str());
  return rcnInvalidArgument;
}

#else

namespace {

// A parse failure carrying the node it is about, so the message names the line.
struct BadValue {
  int line;
  std::string key;
  std::string what;
};

[[noreturn]] void fail(const YAML::Node& node, const std::string& key, const std::string& what) {
  throw BadValue{node.Mark().line + 1, key, what};
}

std::string scalarOf(const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) fail(node, key, "expected a single value");
  return node.Scalar();
}

size_t bytesOf(const YAML::Node& node, const std::string& key) {
  int64_t value = 0;
  std::string why;
  if (!parseIntText(scalarOf(node, key), &value, &why)) fail(node, key, why);
  if (value < 0) fail(node, key, "must not be negative");
  return static_cast<size_t>(value);
}

// A one-shot threshold: the fast path's buffers are sized from it, and at
// most 1 GiB (as ROCENANTE_MAX_BYTES).
size_t oneShotBytesOf(const YAML::Node& node, const std::string& key) {
  const size_t bytes = bytesOf(node, key);
  if (bytes > kMaxOneShotBytes) fail(node, key, "must be at most 1G (the fast path's buffers are sized from it)");
  return bytes;
}

// The two-shot threshold: kept in the format for the kernel's route, but a
// value other than 0 would promise a kernel rocenante does not have (the
// calls would go to NCCL, unsaid).
size_t twoShotBytesOf(const YAML::Node& node, const std::string& key) {
  const size_t bytes = bytesOf(node, key);
  if (bytes != 0)
    fail(node, key, "must be 0: rocenante has no two-shot kernel, so calls above one_shot_max_bytes go to NCCL");
  return bytes;
}

int intOf(const YAML::Node& node, const std::string& key, int lo, int hi) {
  int64_t value = 0;
  std::string why;
  if (!parseIntText(scalarOf(node, key), &value, &why)) fail(node, key, why);
  if (value < lo || value > hi)
    fail(node, key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
  return static_cast<int>(value);
}

bool boolOf(const YAML::Node& node, const std::string& key) {
  bool value = false;
  std::string why;
  if (!parseBoolText(scalarOf(node, key), &value, &why)) fail(node, key, why);
  return value;
}

int forceOf(const YAML::Node& node, const std::string& key) {
  std::string text = scalarOf(node, key);
  if (text == "rocenante") return 1;
  if (text == "nccl") return -1;
  if (text == "none" || text.empty()) return 0;
  fail(node, key, "'" + text + "' is not one of none, rocenante, nccl");
}

NcclAlgo algoOf(const YAML::Node& node, const std::string& key) {
  std::string text = scalarOf(node, key);
  if (text == "default") return NcclAlgo::Default;
  if (text == "ring") return NcclAlgo::Ring;
  if (text == "tree") return NcclAlgo::Tree;
  fail(node, key, "'" + text + "' is not one of default, ring, tree");
}

NcclProto protoOf(const YAML::Node& node, const std::string& key) {
  std::string text = scalarOf(node, key);
  if (text == "default") return NcclProto::Default;
  if (text == "ll") return NcclProto::LL;
  if (text == "ll128") return NcclProto::LL128;
  if (text == "simple") return NcclProto::Simple;
  fail(node, key, "'" + text + "' is not one of default, ll, ll128, simple");
}

// A mapping whose keys are all different: YAML keeps one of two equal keys
// without a word, so `force: nccl` then `force: rocenante` would quietly
// mean one of them.
void requireMap(const YAML::Node& node, const std::string& key) {
  if (!node.IsMap()) fail(node, key, "expected a mapping of keys to values");
  // (A key that is not a scalar is refused as an unknown key where it is read.)
  if (const YAML::Node twice = repeatedKey(node); !twice.IsNull())
    fail(twice, key == "(top level)" ? twice.Scalar() : key + "." + twice.Scalar(), "given twice");
}

NcclPreference preferenceOf(const YAML::Node& node, const std::string& key) {
  requireMap(node, key);
  NcclPreference pref;
  bool haveMax = false;
  for (const auto& item : node) {
    std::string name = item.first.as<std::string>();
    std::string full = key + "." + name;
    if (name == "max_bytes") pref.maxBytes = bytesOf(item.second, full), haveMax = true;
    else if (name == "algo") pref.algo = algoOf(item.second, full);
    else if (name == "proto") pref.proto = protoOf(item.second, full);
    else fail(item.first, full, "unknown key (expected max_bytes, algo, proto)");
  }
  if (!haveMax) fail(node, key + ".max_bytes", "missing; every nccl entry needs max_bytes");
  return pref;
}

std::vector<NcclPreference> preferencesOf(const YAML::Node& node, const std::string& key) {
  if (!node.IsSequence()) fail(node, key, "expected a list of {max_bytes, algo, proto} entries");
  std::vector<NcclPreference> prefs;
  for (size_t i = 0; i < node.size(); ++i)
    prefs.push_back(preferenceOf(node[i], key + "[" + std::to_string(i) + "]"));
  std::stable_sort(prefs.begin(), prefs.end(),
                   [](const NcclPreference& a, const NcclPreference& b) { return a.maxBytes < b.maxBytes; });
  return prefs;
}

PolicyOverrides overridesOf(const YAML::Node& node, const std::string& key) {
  requireMap(node, key);
  PolicyOverrides o;
  for (const auto& item : node) {
    std::string name = item.first.as<std::string>();
    std::string full = key + "." + name;
    const YAML::Node& value = item.second;
    if (name == "one_shot_max_bytes") o.oneShotMaxBytes = oneShotBytesOf(value, full);
    else if (name == "one_shot_max_bytes_graph") o.oneShotMaxBytesGraph = oneShotBytesOf(value, full);
    else if (name == "two_shot_max_bytes") o.twoShotMaxBytes = twoShotBytesOf(value, full);
    else if (name == "all_gather_max_bytes") o.allGatherMaxBytes = oneShotBytesOf(value, full);
    else if (name == "reduce_scatter_max_bytes") o.reduceScatterMaxBytes = oneShotBytesOf(value, full);
    else if (name == "max_ranks") o.maxRanks = intOf(value, full, 0, kMaxCommRanks);
    else if (name == "nccl") o.ncclPrefs = preferencesOf(value, full);
    else
      fail(item.first, full,
           "unknown key (expected one_shot_max_bytes, one_shot_max_bytes_graph, "
           "two_shot_max_bytes, all_gather_max_bytes, reduce_scatter_max_bytes, max_ranks, nccl)");
  }
  return o;
}

bool classOf(const std::string& name, TopoClass* topo) {
  static const struct { const char* name; TopoClass topo; } names[] = {
      {"single_host", TopoClass::SingleHost},
      {"multi_node_any_to_any", TopoClass::MultiNodeAnyToAny},
      {"multi_node_partial", TopoClass::MultiNodePartial},
      {"unknown", TopoClass::Unknown}};
  for (const auto& n : names)
    if (name == n.name) return *topo = n.topo, true;
  return false;
}

void parseClasses(const YAML::Node& node, PolicyFile* out) {
  requireMap(node, "classes");
  for (const auto& item : node) {
    std::string name = item.first.as<std::string>();
    std::string key = "classes." + name;
    TopoClass topo;
    if (name == "default") out->all = overridesOf(item.second, key);
    else if (classOf(name, &topo)) out->perClass[topo] = overridesOf(item.second, key);
    else
      fail(item.first, key,
           "unknown topology class (expected default, single_host, multi_node_any_to_any, "
           "multi_node_partial, unknown)");
  }
}

void parseTop(const YAML::Node& root, PolicyFile* out) {
  if (root.IsNull()) return;  // an empty file changes nothing
  requireMap(root, "(top level)");
  for (const auto& item : root) {
    std::string name = item.first.as<std::string>();
    if (name == "version") {
      if (intOf(item.second, name, 1, 1000) != 1) fail(item.second, name, "only version 1 is known");
    } else if (name == "disable") {
      out->disable = boolOf(item.second, name);
    } else if (name == "force") {
      out->force = forceOf(item.second, name);
    } else if (name == "classes") {
      parseClasses(item.second, out);
    } else {
      fail(item.first, name, "unknown key (expected version, disable, force, classes)");
    }
  }
}

}  // namespace

rcnResult_t policyFileParse(const std::string& text, const std::string& name, PolicyFile* out,
                            std::string* error) {
  *out = PolicyFile{};
  out->path = name;
  try {
    // One document: what a second one said would be dropped without a word
    // (an empty one, as after a final `---`, says nothing).
    const YamlDocuments documents = loadYamlDocuments(text);
    if (documents.extra)
      throw BadValue{documents.extraLine, "(document " + std::to_string(documents.extra + 1) + ")",
                     "a policy file is one YAML document"};
    parseTop(documents.first, out);
    return rcnSuccess;
  } catch (const BadValue& bad) {
    *error = name + ":" + std::to_string(bad.line) + ": key '" + bad.key + "': " + bad.what;
  } catch (const YAML::Exception& e) {
    *error = name + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg;
  }
  RCN_WARN(RCN_LOG_INIT, "policy file %s", error->c_str());
  return rcnInvalidArgument;
}

#endif  // ROCENANTE_HAVE_YAML

}  // namespace rcn
