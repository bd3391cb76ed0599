// How this process learns its place in the run: started by the sweep itself
// (RCNBENCH_* variables), by torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), by mpirun (OMPI_COMM_WORLD_* or PMI_*) or by srun
// (SLURM_* of a step), or by nobody (standalone: it starts the local ranks itself).
// torchrun's agent serves its own store on MASTER_PORT (it tells its workers
// with TORCHELASTIC_USE_AGENT_STORE=True); the rendezvous then uses the next port.
// Pure: the environment comes in as a lookup function, so tests feed their own.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace rcn::bench {

enum class LaunchKind {
  Standalone,  // no launcher: this process is rank 0 and starts the others
  LocalChild,  // started by a standalone sweep; the bootstrap id is in RCNBENCH_ID
  External     // torchrun / mpirun / srun: rank 0 shares the id over MASTER_ADDR:MASTER_PORT
};

struct LaunchInfo {
  LaunchKind kind = LaunchKind::Standalone;
  std::string source;      // "standalone", "sweep", "torchrun", "OpenMPI", "PMI", "Slurm"
  int rank = 0;
  int nranks = 1;          // Standalone: decided later from --gpus or the GPU count
  int localRank = -1;      // -1: unknown (the sweep then uses rank mod local GPU count)
  std::string masterAddr;  // External only
  int masterPort = 0;      // MASTER_PORT, or MASTER_PORT + 1 under torchrun's agent store
  std::string idHex;       // LocalChild only
};

// The variables the sweep sets for the ranks it starts.
inline constexpr const char* kEnvRank = "RCNBENCH_RANK";
inline constexpr const char* kEnvNranks = "RCNBENCH_NRANKS";
inline constexpr const char* kEnvId = "RCNBENCH_ID";
inline constexpr int kDefaultMasterPort = 29500;  // torchrun's default

using EnvLookup = std::function<const char*(const char*)>;

// Reads the launch variables. Returns false with a reason naming the variable
// when they are inconsistent (rank outside the world, bad number, a multi-rank
// launch without MASTER_ADDR).
bool parseLaunchEnv(const EnvLookup& env, LaunchInfo* out, std::string* why);

// Every launcher's rank and size variables, for telling a user what to set:
// "RANK and WORLD_SIZE (torchrun), ..., or SLURM_PROCID and ... (Slurm)".
std::string launcherVarsHint();

// " (RANK is set without WORLD_SIZE)" for each launcher whose rank variable is
// set alone, to say why no launcher was found; "" when none is.
std::string partialLauncherVars(const EnvLookup& env);

// The process environment as an EnvLookup.
EnvLookup processEnv();

// Lower-case hex of bytes, and back (false on odd length or a non-hex digit).
std::string toHex(const void* data, size_t bytes);
bool fromHex(const std::string& hex, std::vector<unsigned char>* out);

// CUDA devices this process sees; 0 without a driver or GPU (the error is cleared).
int visibleGpuCount();

}  // namespace rcn::bench
