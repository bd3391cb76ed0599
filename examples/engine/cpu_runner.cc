// SPDX-License-Identifier: BSD-3-Clause
#include "cpu_runner.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "checkpoint.h"
#include "cpu_model.h"
#include "host_allreduce.h"
#include "launcher.h"
#include "sampler.h"
#include "shapes.h"
#include "shard.h"
#include "text_codec.h"

namespace engine {
namespace {

// This process's place in the run, and the all-reduce that joins it to the others.
struct CpuRank {
  int rank = 0, size = 1;
  rcnComm_t comm = nullptr;
  std::unique_ptr<AllReduceHook> allReduce;

  ~CpuRank() {
    allReduce.reset();
    if (comm) rcnCommDestroy(comm);
  }
};

void joinRanks(const EngineOptions& o, CpuRank& r) {
  r.rank = std::max(0, o.rank);
  r.size = o.tp;
  if (o.tp == 1) {
    r.allReduce = std::make_unique<NoAllReduce>();
    return;
  }
  r.comm = joinComm(o, r.rank);
  r.allReduce = std::make_unique<RcnHostAllReduce>(r.comm);
}

// Only this rank's part of the weights (a Hugging Face checkpoint is read that way from disk).
ModelWeights loadShard(const EngineOptions& o, int size, int rank) {
  if (!o.randomWeights) return loadCheckpointShard(o.modelPath, size, rank);
  ModelWeights full = randomWeights(shapeConfig(o.shape), o.sampler.seed);
  if (size == 1) return full;
  return shardWeights(full, planShard(full.config, size, rank));
}

// Every rank computes the same logits (the host backend sums in rank order)
// and so samples the same tokens; rank 0 prints them.
int generate(const EngineOptions& o, CpuRank& r) {
  ModelWeights shard = loadShard(o, r.size, r.rank);
  const ModelConfig config = shard.config;
  if (r.rank == 0)
    std::fprintf(stderr, "cpu: %s, tp=%d%s\n", describeConfig(config).c_str(), r.size,
                 r.size > 1 ? " (one process per rank, rocenante host backend)" : "");
  CpuModel model(std::move(shard), planShard(config, r.size, r.rank), r.allReduce.get());
  const bool printer = r.rank == 0 && !o.quiet;

  std::unique_ptr<TextCodec> codec = openTextCodec(o.modelPath, o.tokenizerPath, config.vocab, o.promptGiven);
  const std::vector<int> prompt = codec->encode(o.prompt);
  requirePromptFits(prompt, config.seqLen);
  Sampler sampler(o.sampler);
  int token = prompt[0];
  const int total = int(std::min<int64_t>(config.seqLen, int64_t(prompt.size()) + o.steps));
  auto start = std::chrono::steady_clock::now();
  TokenStream stream(*codec, printer);
  stream.echoPrompt(o.prompt, prompt);
  int positions = 0;  // run so far: a stop token ends the loop before total
  for (int pos = 0; pos + 1 < total; ++pos) {
    const std::vector<float>& logits = model.forward(token, pos);
    ++positions;
    const bool inPrompt = pos + 1 < int(prompt.size());
    int next = inPrompt ? prompt[pos + 1] : sampler.sample(logits.data(), config.vocab);
    if (!inPrompt && !stream.accept(token, next)) break;
    token = next;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (printer) {
    std::printf("\n");
    std::fflush(stdout);
  }
  if (r.rank == 0) {
    std::fprintf(stderr, "cpu: %d tokens generated, %.1f tokens/s overall\n", stream.generated(),
                 positions / std::max(seconds, 1e-9));
    stream.noteContextEnd(o.steps, config.seqLen);
  }
  return 0;
}

}  // namespace

int runCpu(const EngineOptions& o, int argc, char** argv) {
  if (o.tp > 1) {
    // The host backend even where a GPU is present: --device cpu keeps the GPU out of it.
    setenv("ROCENANTE_BACKEND", "host", 1);
    if (o.rank < 0) {
      rcnUniqueId id;
      rcnCheck(rcnGetUniqueId(&id), "rcnGetUniqueId");
      return launchRanks(o, argc, argv, id);
    }
  }
  CpuRank r;
  joinRanks(o, r);
  return generate(o, r);
}

}  // namespace engine
