// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_launch.h"

namespace rcn::bench {

bool parseLaunchEnv(const EnvLookup& env, LaunchInfo* out, std::string* why) {
  LaunchInfo info;
  if (env(kEnvRank)) {
    info.kind = LaunchKind::LocalChild;
    info.source = "sweep";
    if (!readRankAndSize(env, kEnvRank, kEnvNranks, &info.rank, &info.nranks, why)) return false;
    info.localRank = info.rank;
    info.idHex = env(kEnvId) ? env(kEnvId) : "";
    if (info.idHex.empty()) {
      *why = std::string(kEnvRank) + " is set but " + kEnvId + " is not";
      return false;
    }
    *out = info;
    return true;
  }
  if (!parseLauncherEnv(env, &info, why)) return false;
  info.kind = info.external ? LaunchKind::External : LaunchKind::Standalone;
  *out = info;
  return true;
}

}  // namespace rcn::bench
