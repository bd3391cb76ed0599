// SPDX-License-Identifier: BSD-3-Clause
#include "core/launch_env.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <iterator>

#include "core/bootstrap.h"
#include "core/strings.h"

namespace rcn {
namespace {

// One launcher's variable names; nullptr where it has none. rankAlone: its
// rank variable may be set without its size outside a launch (a Slurm batch
// script), so that says nothing.
struct LauncherVars {
  const char* source;
  const char* rank;
  const char* size;
  const char* localRank;
  const char* localRankAlt;
  bool rankAlone = false;
};

// Checked in this order: the first whose rank and size variables are both set wins.
const LauncherVars kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", nullptr},
    {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", nullptr},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"},
    // Only inside an srun step: a batch script's own environment also has
    // SLURM_PROCID and SLURM_NTASKS, but it is one process.
    {"Slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", nullptr, true},
};

// Decimal digits, with blanks around them allowed on both sides alike
// (strtol alone skips them in front only, and takes a sign).
bool parseInt(const char* text, int* out) {
  if (!text) return false;
  const std::string digits = trim(text);
  if (digits.empty() || digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  const long long value = std::stoll(digits);
  if (value > 1000000000LL) return false;
  *out = static_cast<int>(value);
  return true;
}

bool readInt(const EnvLookup& env, const char* name, int* out, std::string* why) {
  const char* text = env(name);
  if (parseInt(text, out)) return true;
  *why = std::string(name) + (text ? "='" + std::string(text) + "' is not an integer from 0 to 1000000000" : " is not set");
  return false;
}

bool parseExternal(const EnvLookup& env, const LauncherVars& vars, LauncherInfo* info, std::string* why) {
  info->external = true;
  info->source = vars.source;
  if (!readRankAndSize(env, vars.rank, vars.size, &info->rank, &info->nranks, why)) return false;
  for (const char* name : {vars.localRank, vars.localRankAlt}) {
    if (name && env(name) && !readInt(env, name, &info->localRank, why)) return false;
    if (info->localRank >= 0 && info->localRank >= info->nranks) {
      *why = std::string(name) + "=" + std::to_string(info->localRank) + " is not below " + vars.size + "=" +
             std::to_string(info->nranks) + " (a host cannot run more ranks than the world has)";
      return false;
    }
    if (info->localRank >= 0) break;
  }
  const char* addr = env("MASTER_ADDR");
  if (addr && *addr) info->masterAddr = addr;
  info->masterPort = kDefaultMasterPort;
  if (env("MASTER_PORT")) {
    if (!readInt(env, "MASTER_PORT", &info->masterPort, why)) return false;
    if (info->masterPort < 1 || info->masterPort > 65535) {
      *why = std::string("MASTER_PORT=") + env("MASTER_PORT") + " is not a TCP port (1-65535)";
      return false;
    }
  }
  // torchrun's agent already serves its own store on MASTER_PORT and says so
  // to its workers; our rendezvous then takes the next port.
  const char* agentStore = env("TORCHELASTIC_USE_AGENT_STORE");
  if (agentStore && std::string(agentStore) == "True") {
    if (info->masterPort == 65535) {
      *why = "MASTER_PORT=65535 is torchrun's store; rocenante's rendezvous needs MASTER_PORT + 1";
      return false;
    }
    info->masterPort += 1;
  }
  if (info->nranks > 1 && info->masterAddr.empty()) {
    *why = std::string(vars.source) + " launch (" + vars.rank + ", " + vars.size +
           ") without MASTER_ADDR: set MASTER_ADDR (rank 0's host) and MASTER_PORT (default " +
           std::to_string(kDefaultMasterPort) + ") in every rank's environment";
    return false;
  }
  return true;
}

}  // namespace

bool readRankAndSize(const EnvLookup& env, const char* rankVar, const char* sizeVar, int* rank, int* nranks,
                     std::string* why) {
  if (!readInt(env, rankVar, rank, why) || !readInt(env, sizeVar, nranks, why)) return false;
  if (*nranks > kMaxCommRanks) {
    *why = std::string(sizeVar) + "=" + std::to_string(*nranks) + " is more than the " + std::to_string(kMaxCommRanks) +
           " ranks a communicator may have";
    return false;
  }
  if (*nranks < 1 || *rank >= *nranks) {
    *why = std::string(rankVar) + "=" + std::to_string(*rank) + " is not a rank of " + sizeVar + "=" +
           std::to_string(*nranks);
    return false;
  }
  return true;
}

bool parseLauncherEnv(const EnvLookup& env, LauncherInfo* out, std::string* why) {
  LauncherInfo info;
  for (const LauncherVars& vars : kLaunchers) {
    if (env(vars.rank) && env(vars.size)) {
      if (!parseExternal(env, vars, &info, why)) return false;
      *out = info;
      return true;
    }
  }
  info.source = "standalone";
  *out = info;
  return true;
}

std::string partialLauncherVars(const EnvLookup& env) {
  std::string note;
  for (const LauncherVars& vars : kLaunchers)
    if (env(vars.rank) && !env(vars.size) && !vars.rankAlone)
      note += std::string(" (") + vars.rank + " is set without " + vars.size + ")";
  return note;
}

std::string launcherVarsHint() {
  const size_t count = std::size(kLaunchers);
  std::string hint;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) hint += i + 1 == count ? ", or " : ", ";
    hint += std::string(kLaunchers[i].rank) + " and " + kLaunchers[i].size + " (" + kLaunchers[i].source + ")";
  }
  return hint;
}

EnvLookup processEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

int visibleGpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace rcn
