// SPDX-License-Identifier: BSD-3-Clause
#include "checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "llama2c_loader.h"
#include "shard.h"
#ifdef ENGINE_HAVE_HF
#include "hf_loader.h"
#endif

namespace engine {

namespace {
constexpr int kMaxContext = 4096;

bool isDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

[[noreturn]] [[maybe_unused]] void throwNoHf(const std::string& path) {
  throw EngineError(path + " is a directory (a Hugging Face checkpoint?), but this build has no rcn_engine_hf "
                    "(it needs nlohmann-json)");
}
}  // namespace

ModelWeights loadCheckpointShard(const std::string& path, int size, int rank) {
  if (isDirectory(path)) {
#ifdef ENGINE_HAVE_HF
    hf::HfModel m = hf::loadHfShard(path, kMaxContext, size, rank);
    // Refuses what the forward pass would silently get wrong (e.g. yarn RoPE scaling).
    hf::requireEngineSupport(m.hf);
    // Transformers warns about these too: a config.json of another checkpoint, say.
    if (rank == 0 && !m.unusedTensors.empty())
      std::fprintf(stderr, "rcn_engine: note: %s: %zu tensors are not used by its config.json (%s%s)\n", path.c_str(),
                   m.unusedTensors.size(), m.unusedTensors[0].c_str(), m.unusedTensors.size() > 1 ? ", ..." : "");
    return std::move(m.weights);
#else
    throwNoHf(path);
#endif
  }
  ModelWeights full = loadLlama2c(path);
  full.config.seqLen = std::min(full.config.seqLen, kMaxContext);
  if (size == 1) return full;
  return shardWeights(full, planShard(full.config, size, rank));
}

ModelConfig checkpointConfig(const std::string& path) {
  if (isDirectory(path)) {
#ifdef ENGINE_HAVE_HF
    return hf::readHfConfig(path, kMaxContext).config;
#else
    throwNoHf(path);
#endif
  }
  ModelConfig config = readLlama2cConfig(path);
  config.seqLen = std::min(config.seqLen, kMaxContext);
  return config;
}

}  // namespace engine
