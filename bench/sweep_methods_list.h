// SPDX-License-Identifier: BSD-3-Clause
// The methods the sweep compares, in the order its tables show them. Names are
// stable: they appear in --methods, the CSV/JSON files and the plot.
#pragma once

#include <string>

namespace rcn::bench {

enum class MethodKind { RcnForced, RcnTwoShot, RcnAuto, Nccl };

struct MethodSpec {
  const char* name;
  MethodKind kind;
  const char* ncclAlgo;   // NCCL_ALGO while its NCCL comm is created (nullptr: unset)
  const char* ncclProto;  // NCCL_PROTO likewise
  bool symmetric;         // buffers registered as NCCL symmetric windows
  const char* label;      // for tables and the plot legend
};

inline constexpr MethodSpec kMethods[] = {
    {"rcn-oneshot", MethodKind::RcnForced, nullptr, nullptr, false, "rocenante one-shot"},
    {"rcn-twoshot", MethodKind::RcnTwoShot, nullptr, nullptr, false, "rocenante two-shot"},
    {"rcn-auto", MethodKind::RcnAuto, nullptr, nullptr, false, "rocenante auto policy"},
    {"nccl", MethodKind::Nccl, nullptr, nullptr, false, "NCCL default"},
    {"nccl-ring", MethodKind::Nccl, "Ring", nullptr, false, "NCCL Ring"},
    {"nccl-ring-ll", MethodKind::Nccl, "Ring", "LL", false, "NCCL Ring LL"},
    {"nccl-ring-ll128", MethodKind::Nccl, "Ring", "LL128", false, "NCCL Ring LL128"},
    {"nccl-ring-simple", MethodKind::Nccl, "Ring", "Simple", false, "NCCL Ring Simple"},
    {"nccl-symm", MethodKind::Nccl, nullptr, nullptr, true, "NCCL symmetric windows"},
};
inline constexpr int kNumMethods = sizeof(kMethods) / sizeof(kMethods[0]);

// The methods speedups are quoted against.
inline constexpr const char* kBaselineDefault = "nccl";
inline constexpr const char* kBaselineRing = "nccl-ring";
// The method whose crossover the policy file records.
inline constexpr const char* kOneShot = "rcn-oneshot";

inline int methodIndex(const std::string& name) {
  for (int i = 0; i < kNumMethods; ++i)
    if (name == kMethods[i].name) return i;
  return -1;
}

inline bool methodIsNccl(int index) { return kMethods[index].kind == MethodKind::Nccl; }

inline std::string methodNamesText() {
  std::string text;
  for (int i = 0; i < kNumMethods; ++i) text += (i ? "," : "") + std::string(kMethods[i].name);
  return text;
}

}  // namespace rcn::bench
