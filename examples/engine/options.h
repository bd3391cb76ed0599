// SPDX-License-Identifier: BSD-3-Clause
// Command-line options of rcn_engine (see docs/ENGINE.md for the full list).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sampler.h"

namespace engine {

struct EngineOptions {
  std::string modelPath;        // llama2.c checkpoint or Hugging Face directory
  std::string tokenizerPath;    // llama2.c tokenizer.bin or tokenizer.json
  bool randomWeights = false;
  std::string shape;            // with randomWeights
  std::string prompt = "Once upon a time";
  bool promptGiven = false;     // --prompt on the command line (without a tokenizer it cannot be encoded)
  int steps = 128;              // tokens to generate
  SamplerOptions sampler;
  std::string device = "auto";  // auto, cpu, gpu
  int tp = 1;
  bool tpGiven = false;         // --tp on the command line (else a launcher's world size may set tp)
  std::string collective = "rocenante";  // rocenante or nccl
  std::string dtype = "auto";   // GPU weights/activations: f32, bf16, auto
  bool cudaGraph = true;
  bool gemv = true;             // --no-gemv: cuBLAS for every product
  bool fuseAllReduce = false;   // --fused-allreduce: the O and down products sum over the ranks (device API)
  bool fuseNorm = false;        // --fused-norm: each all-reduce adds the residual and normalizes (bf16)
  bool bench = false;
  std::vector<int> batches = {1};
  int promptLen = 128;          // bench prefill tokens per sequence
  int decodeSteps = 64;         // bench decode steps timed
  std::string jsonPath;         // bench results as JSON
  bool quiet = false;
  bool profile = false;          // bench: per-operation times of eager decode steps
  int shardOf = 1;               // bench --shard-of N: rank 0's shard of a TP=N split alone, all-reduces skipped
  // Set by the launcher in each child process.
  int rank = -1;
  int idFd = -1;  // the pipe the launcher writes the unique id into (not argv: /proc shows argv to every user)
  int errorFd = -1;             // the pipe for this rank's error message (reportError, launcher.h)
  // Set by adoptExternalLaunch (launcher.h) under torchrun / mpirun / srun:
  // rank and tp come from the launcher, and the communicator from rcnCommInitFromLaunch.
  bool externalLaunch = false;
  int localRank = -1;           // -1: the launcher does not say
};

// Throws EngineError with the offending option on bad input; exits 0 after --help.
EngineOptions parseOptions(int argc, char** argv);

// The CPU path runs float32, eagerly, without the GPU's kernels or the
// benchmark: an option that only steers those would be ignored without a
// word, so it is refused by name.
void requireCpuOptions(const EngineOptions& o);

void printUsage(const char* program);

}  // namespace engine
