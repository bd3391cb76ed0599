// SPDX-License-Identifier: BSD-3-Clause
// --write-policy: the measured crossovers as a routing policy file in the
// format of docs/POLICY.md (parsed by src/core/policy_file.cc), so a user can
// point ROCENANTE_POLICY at what their own machine measured.
#pragma once

#include <string>

#include "sweep_results.h"

namespace rcn::bench {

// The smallest measured size at or below which a loss means one-shot loses
// at every size (below it an all-reduce costs its fixed latency alone); a
// loss at a larger first size says nothing about the sizes not measured.
inline constexpr size_t kPolicyBottomBytes = 1024;

struct PolicyChoice;
// Whether the policy file written from c sets anything: a crossover measured
// within the sizes swept, or an NCCL preference.
bool policySetsAnything(const PolicyChoice& c);

struct PolicyChoice {
  size_t oneShotMaxBytes = 0;       // eager crossover (0: rocenante never won)
  size_t oneShotMaxBytesGraph = 0;  // graph crossover
  bool haveEager = false, haveGraph = false;
  // Why a measured crossover is not written ("" when it is): it lies outside
  // the sizes measured, and the library's built-in threshold then stays.
  std::string eagerUnknown, graphUnknown;
  struct NcclRange {
    size_t maxBytes;
    const char* algo;   // policy file spelling: default, ring, tree
    const char* proto;  // default, ll, ll128, simple
  };
  std::vector<NcclRange> nccl;      // preferences for the calls NCCL keeps
};

// A non-default NCCL algorithm/protocol is only preferred where it beats NCCL's
// own choice by at least this fraction (less is noise, not worth overriding).
inline constexpr double kNcclPreferenceMargin = 0.05;

// Derives the policy from the results: the one-shot crossovers per mode, and
// for each run of sizes the NCCL Ring protocol that beat NCCL's default
// (graph mode when measured, else eager).
PolicyChoice choosePolicy(const SweepResults& r);

// The YAML text. topoClass is the policy-file class the measurement applies to
// ("single_host" when every rank ran on one host, else "default").
std::string policyYaml(const SweepResults& r, const PolicyChoice& choice, const std::string& topoClass);

}  // namespace rcn::bench
