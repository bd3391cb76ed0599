// SPDX-License-Identifier: BSD-3-Clause
// How this process learns its place in the run: started by torchrun (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), by mpirun
// (OMPI_COMM_WORLD_* or PMI_*) or by srun (SLURM_* of a step), or by nobody
// (standalone: the program starts its ranks itself, or runs alone).
// torchrun's agent serves its own store on MASTER_PORT (it tells its workers
// with TORCHELASTIC_USE_AGENT_STORE=True); the rendezvous then uses the next port.
// Pure: the environment comes in as a lookup function, so tests feed their own.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace rcn {

struct LauncherInfo {
  bool external = false;  // a launcher's variables were found
  std::string source;     // "standalone", "torchrun", "OpenMPI", "PMI", "Slurm"
  int rank = 0;
  int nranks = 1;          // standalone: decided by the program
  int localRank = -1;      // -1: unknown
  std::string masterAddr;  // external only
  int masterPort = 0;      // MASTER_PORT, or MASTER_PORT + 1 under torchrun's agent store
};

inline constexpr int kDefaultMasterPort = 29500;  // torchrun's default

using EnvLookup = std::function<const char*(const char*)>;

// Reads the launchers' variables. Returns false with a reason naming the
// variable when they are inconsistent (rank outside the world, bad number, a
// multi-rank launch without MASTER_ADDR).
bool parseLauncherEnv(const EnvLookup& env, LauncherInfo* out, std::string* why);

// Reads rankVar and sizeVar as a rank of a world of at most kMaxCommRanks;
// false with a reason naming the variable otherwise.
bool readRankAndSize(const EnvLookup& env, const char* rankVar, const char* sizeVar, int* rank, int* nranks,
                     std::string* why);

// Every launcher's rank and size variables, for telling a user what to set:
// "RANK and WORLD_SIZE (torchrun), ..., or SLURM_PROCID and ... (Slurm)".
std::string launcherVarsHint();

// " (RANK is set without WORLD_SIZE)" for each launcher whose rank variable is
// set alone, to say why no launcher was found; "" when none is.
std::string partialLauncherVars(const EnvLookup& env);

// The process environment as an EnvLookup.
EnvLookup processEnv();

// CUDA devices this process sees; 0 without a driver or GPU (the error is cleared).
int visibleGpuCount();

}  // namespace rcn
