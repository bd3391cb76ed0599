// --write-policy: the measured crossovers as a routing policy file in the
// format of docs/POLICY.md (parsed by src/core/policy_file.cc), so a user can
// point ROCENANTE_POLICY at what their own machine measured.
#pragma once

#include <string>

#include "sweep_results.h"

namespace rcn::bench {

struct PolicyChoice {
  size_t oneShotMaxBytes = 0;       // eager crossover (0: rocenante never won)
  size_t oneShotMaxBytesGraph = 0;  // graph crossover
  bool haveEager = false, haveGraph = false;
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
