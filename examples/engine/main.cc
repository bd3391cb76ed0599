// rcn_engine: a tensor-parallel decode engine that drives rocenante.
//   rcn_engine --model stories260K.bin --tokenizer tok512.bin --prompt "Once upon a time"
//   rcn_engine --device gpu --tp 2 --random-weights --shape llama3-8b --bench --batch 1,8
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cpu_model.h"
#include "checkpoint.h"
#include "options.h"
#include "sampler.h"
#include "shapes.h"
#include "text_codec.h"
#ifdef ENGINE_HAVE_GPU
#include "gpu_runner.h"
#endif

namespace engine {
namespace {

// Prompt in, streamed text out, on the float32 CPU path (TP ranks as threads).
int generateOnCpu(const EngineOptions& o) {
  ModelWeights weights = o.randomWeights ? randomWeights(shapeConfig(o.shape), o.sampler.seed)
                                         : loadCheckpointShard(o.modelPath, 1, 0);
  const ModelConfig config = weights.config;
  std::fprintf(stderr, "cpu: %s, tp=%d\n", describeConfig(config).c_str(), o.tp);
  CpuTpModel model(weights, o.tp);
  weights = ModelWeights();  // the shards hold their own copies

  std::unique_ptr<TextCodec> codec = openTextCodec(o.modelPath, o.tokenizerPath, config.vocab);
  std::vector<int> prompt = codec->encode(o.prompt);

  Sampler sampler(o.sampler);
  int token = prompt[0];
  const int total = std::min(config.seqLen, int(prompt.size()) + o.steps);
  auto start = std::chrono::steady_clock::now();
  int generated = 0;
  for (int pos = 0; pos + 1 < total; ++pos) {
    const std::vector<float>& logits = model.forward(token, pos);
    int next = pos + 1 < int(prompt.size()) ? prompt[pos + 1] : sampler.sample(logits.data(), config.vocab);
    if (pos + 1 >= int(prompt.size())) {
      ++generated;
      if (codec->isStop(next)) break;
    }
    if (!o.quiet) {
      std::fputs(codec->decode(token, next).c_str(), stdout);
      std::fflush(stdout);
    }
    token = next;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.quiet) std::printf("\n");
  std::fprintf(stderr, "cpu: %d tokens generated, %.1f tokens/s overall\n", generated,
               (total - 1) / std::max(seconds, 1e-9));
  return 0;
}

bool wantGpu(const EngineOptions& o) {
  if (o.device == "cpu") return false;
#ifdef ENGINE_HAVE_GPU
  if (o.device == "gpu") return true;
  return gpuAvailable();
#else
  if (o.device == "gpu") throw EngineError("this build has no GPU path");
  return false;
#endif
}

}  // namespace
}  // namespace engine

int main(int argc, char** argv) {
  try {
    engine::EngineOptions options = engine::parseOptions(argc, argv);
    if (engine::wantGpu(options)) {
#ifdef ENGINE_HAVE_GPU
      return engine::runGpu(options, argc, argv);
#endif
    }
    if (options.bench) throw engine::EngineError("--bench runs on the gpu path only");
    return engine::generateOnCpu(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rcn_engine: error: %s\n", e.what());
    return 1;
  }
}
