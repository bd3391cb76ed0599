// SPDX-License-Identifier: BSD-3-Clause
// The YAML routing policy file (ROCENANTE_POLICY). Parsing only: what the
// file says, every field optional. policyLoad (policy.cc) layers it over the
// built-in defaults and under the environment. docs/POLICY.md describes the
// format; policies/sample.yaml is a documented example.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/policy.h"
#include "rocenante/rocenante.h"

namespace rcn {

// What one section (classes.default or classes.<class>) sets.
struct PolicyOverrides {
  std::optional<size_t> oneShotMaxBytes;
  std::optional<size_t> oneShotMaxBytesGraph;
  std::optional<size_t> twoShotMaxBytes;
  std::optional<size_t> allGatherMaxBytes;
  std::optional<size_t> reduceScatterMaxBytes;
  std::optional<int> maxRanks;
  std::optional<std::vector<NcclPreference>> ncclPrefs;
};

struct PolicyFile {
  std::string path;
  std::optional<bool> disable;
  std::optional<int> force;  // +1 rocenante, -1 nccl, 0 none
  PolicyOverrides all;       // classes.default
  std::map<TopoClass, PolicyOverrides> perClass;
};

// Reads and parses the file. On bad input: rcnInvalidArgument, a WARN, and
// *error set to "<path>:<line>: key '<key>': <what is wrong>".
rcnResult_t policyFileLoad(const std::string& path, PolicyFile* out, std::string* error);

// Same, from text already in memory; `name` stands for the path in messages.
rcnResult_t policyFileParse(const std::string& text, const std::string& name, PolicyFile* out,
                            std::string* error);

// Applies one section's values over a config.
void policyApplyOverrides(const PolicyOverrides& o, PolicyConfig* config);

}  // namespace rcn
