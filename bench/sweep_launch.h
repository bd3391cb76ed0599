// SPDX-License-Identifier: BSD-3-Clause
// How a sweep process learns its place in the run: a launcher's variables
// (core/launch_env.h), or the RCNBENCH_* variables a standalone sweep sets for
// the local ranks it starts, which carry the bootstrap id.
#pragma once

#include <string>

#include "core/launch_env.h"

namespace rcn::bench {

enum class LaunchKind {
  Standalone,  // no launcher: this process is rank 0 and starts the others
  LocalChild,  // started by a standalone sweep; the bootstrap id is in RCNBENCH_ID
  External     // torchrun / mpirun / srun: rank 0 shares the id over MASTER_ADDR:MASTER_PORT
};

struct LaunchInfo : LauncherInfo {  // source "sweep" for a LocalChild
  LaunchKind kind = LaunchKind::Standalone;
  std::string idHex;  // LocalChild only
};

// The variables the sweep sets for the ranks it starts.
inline constexpr const char* kEnvRank = "RCNBENCH_RANK";
inline constexpr const char* kEnvNranks = "RCNBENCH_NRANKS";
inline constexpr const char* kEnvId = "RCNBENCH_ID";

// The sweep's own variables first (they win over a surrounding launcher's),
// then the launchers'. Returns false with a reason naming the variable when
// they are inconsistent.
bool parseLaunchEnv(const EnvLookup& env, LaunchInfo* out, std::string* why);

}  // namespace rcn::bench
