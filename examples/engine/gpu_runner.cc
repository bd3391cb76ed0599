// SPDX-License-Identifier: BSD-3-Clause
#include "gpu_runner.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <string>

#include <cuda_runtime_api.h>

#include "gpu_model.h"
#include "launcher.h"
#include "checkpoint.h"
#include "rcn_allreduce.h"
#include "shapes.h"
#include "text_codec.h"

namespace engine {
namespace {

void cudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw EngineError(std::string(what) + ": " + cudaGetErrorString(e));
}

// text as the inside of a JSON string (a model path may hold '"' or '\\').
std::string jsonText(const std::string& text) {
  std::string out;
  char escaped[8];
  for (unsigned char c : text) {
    const bool plain = c >= 0x20 && c != '"' && c != '\\';
    std::snprintf(escaped, sizeof escaped, plain ? "%c" : "\\u%04x", c);
    out += escaped;
  }
  return out;
}

// --json's file, opened (for appending) before the bench runs, so that a
// path that cannot be written fails at once rather than after the timing.
struct JsonOutput {
  std::FILE* file = nullptr;
  std::string path;

  explicit JsonOutput(const std::string& p) : path(p) {
    if (path.empty()) return;
    file = std::fopen(path.c_str(), "a");
    if (!file) throw EngineError("--json: cannot open " + path + " for writing: " + std::strerror(errno));
  }
  ~JsonOutput() {
    if (file) std::fclose(file);
  }
  void close() {
    std::FILE* f = file;
    file = nullptr;
    const bool written = !std::ferror(f);
    if (std::fclose(f) != 0 || !written) throw EngineError("--json: cannot write " + path + ": " + std::strerror(errno));
  }
};

// --shard-of: the all-reduces of a rank whose peers are not there, skipped,
// so that a step times only the rank's own compute (its argmax then sees only
// its slice of the vocabulary: the tokens are not the model's). With
// --fused-norm the residual add and norm still run, through a communicator
// of this rank alone: the fused kernel with nobody to exchange with.
class SkippedAllReduce : public GpuAllReduce {
 public:
  explicit SkippedAllReduce(rcnComm_t alone) : alone_(alone) {}
  void sum(void*, size_t, DType, cudaStream_t) override {}
  void maxKeys(uint64_t*, size_t, cudaStream_t) override {}
  void sumResidualNorm(const void* delta, void* residual, const void* weight, void* out, int n, int dim, float eps,
                       cudaStream_t stream) override {
    if (!alone_) throw EngineError("--shard-of without --fused-norm has no norm communicator");
    RcnAllReduce(alone_).sumResidualNorm(delta, residual, weight, out, n, dim, eps, stream);
  }

 private:
  rcnComm_t alone_;
};

// A communicator of this process alone on the current device, with no NCCL
// beside it (the fast path then takes a single rank's calls).
rcnComm_t commAlone() {
  int device = 0;
  cudaCheck(cudaGetDevice(&device), "cudaGetDevice");
  setenv("ROCENANTE_NATIVE_NCCL", "0", 1);
  rcnComm_t comm = nullptr;
  const rcnResult_t made = rcnCommInitAll(&comm, 1, &device);
  unsetenv("ROCENANTE_NATIVE_NCCL");
  rcnCheck(made, "rcnCommInitAll (one rank, for --shard-of --fused-norm)");
  return comm;
}

struct Rank {
  int rank = 0, size = 1, device = 0;
  int shards = 1;  // how the model is split: size, or --shard-of's N for a lone shard
  rcnComm_t comm = nullptr;
  std::unique_ptr<RcnAllReduce> allReduce;
  std::unique_ptr<SkippedAllReduce> skipped;  // --shard-of
  std::string path = "none";  // how small all-reduces travel

  GpuAllReduce* hook() const { return skipped ? static_cast<GpuAllReduce*>(skipped.get()) : allReduce.get(); }

  ~Rank() {
    if (comm) rcnCommDestroy(comm);
  }
};

void setupRank(const EngineOptions& o, Rank& r) {
  r.rank = std::max(0, o.rank);
  r.size = o.tp;
  int devices = 0;
  cudaCheck(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices < 1) throw EngineError("no GPU");
  if (o.externalLaunch) {
    // The launcher's ranks may span hosts: the local rank picks the GPU, unless
    // the launcher gave each process its own (one visible, CUDA_VISIBLE_DEVICES).
    const int local = o.localRank >= 0 ? o.localRank : r.rank % devices;
    r.device = devices == 1 ? 0 : local;
    if (r.device >= devices)
      throw EngineError("local rank " + std::to_string(local) + " has no GPU of its own; this process sees " +
                        std::to_string(devices) + " (start at most one rank per GPU)");
  } else {
    if (o.tp > devices)
      throw EngineError("--tp " + std::to_string(o.tp) + " needs as many GPUs; found " + std::to_string(devices));
    r.device = r.rank % devices;
  }
  cudaCheck(cudaSetDevice(r.device), "cudaSetDevice");
  r.shards = o.tp;
  if (o.shardOf > 1) {
    if (o.tp > 1)
      throw EngineError("--shard-of times one shard alone: it needs a single rank, not " + std::to_string(o.tp));
    r.shards = o.shardOf;
    if (o.fuseNorm) r.comm = commAlone();
    r.skipped = std::make_unique<SkippedAllReduce>(r.comm);
  }
  if (o.tp == 1) return;
  r.comm = joinComm(o, r.rank);  // on the device just set
  r.allReduce = std::make_unique<RcnAllReduce>(r.comm);
  rcnCommInfo info{};
  if (rcnCommQuery(r.comm, &info) == rcnSuccess) {
    r.path = info.transport;
    if (r.rank == 0)
      std::fprintf(stderr, "rank 0: communicator path %s (fast path up to %zu bytes): %s\n", info.transport,
                   info.maxBytes, info.reason);
  }
}

bool isBigShape(const EngineOptions& o) { return o.randomWeights && o.shape.rfind("tiny", 0) != 0; }

DType pickDtype(const EngineOptions& o) {
  if (o.dtype == "f32") return DType::F32;
  if (o.dtype == "bf16") return DType::BF16;
  return isBigShape(o) ? DType::BF16 : DType::F32;
}

// Loads or generates this rank's weights into a new model.
// A maxContext of 0 means the model's seq_len (at most 4096), prefilled in one pass.
std::unique_ptr<GpuModel> buildModel(const EngineOptions& o, Rank& r, GpuModelOptions mo, ModelConfig* configOut) {
  auto fitContext = [&](const ModelConfig& c) {
    if (mo.maxContext > 0) return;
    mo.maxContext = std::min(c.seqLen, 4096);
    mo.maxTokens = mo.maxContext;
  };
  if (isBigShape(o)) {
    ModelConfig c = shapeConfig(o.shape);
    *configOut = c;
    fitContext(c);
    auto model = std::make_unique<GpuModel>(c, planShard(c, r.shards, r.rank), mo, r.hook());
    model->randomizeWeights(o.sampler.seed);
    return model;
  }
  if (o.randomWeights) {
    ModelWeights full = randomWeights(shapeConfig(o.shape), o.sampler.seed);
    *configOut = full.config;
    fitContext(full.config);
    ShardLayout layout = planShard(full.config, r.shards, r.rank);
    auto model = std::make_unique<GpuModel>(full.config, layout, mo, r.hook());
    model->loadWeights(shardWeights(full, layout));
    return model;
  }
  ModelWeights shard = loadCheckpointShard(o.modelPath, r.shards, r.rank);  // only this rank's part
  *configOut = shard.config;
  fitContext(shard.config);
  auto model = std::make_unique<GpuModel>(shard.config, planShard(shard.config, r.shards, r.rank), mo, r.hook());
  model->loadWeights(shard);
  return model;
}

int generate(const EngineOptions& o, Rank& r) {
  GpuModelOptions mo;
  mo.dtype = pickDtype(o);
  mo.gemv = o.gemv;
  mo.fuseAllReduce = o.fuseAllReduce;
  mo.fuseNorm = o.fuseNorm;
  mo.maxSeqs = 1;
  mo.maxContext = 0;  // the model's own seq_len
  ModelConfig c;
  std::unique_ptr<GpuModel> model = buildModel(o, r, mo, &c);
  std::unique_ptr<TextCodec> codec = openTextCodec(o.modelPath, o.tokenizerPath, c.vocab, o.promptGiven);
  std::vector<int> prompt = codec->encode(o.prompt);
  requirePromptFits(prompt, model->maxContext());
  const bool printer = r.rank == 0 && !o.quiet;
  TokenStream stream(*codec, printer);
  stream.echoPrompt(o.prompt, prompt);

  Sampler sampler(o.sampler);
  auto start = std::chrono::steady_clock::now();
  model->prefill({prompt});
  if (o.cudaGraph) model->captureDecodeGraph();
  int previous = prompt.back();
  for (int step = 0; step < o.steps && model->position() < model->maxContext(); ++step) {
    int next;
    if (o.sampler.temperature > 0) {
      std::vector<float> logits = model->logits(0);
      next = sampler.sample(logits.data(), c.vocab);
      model->setNextTokens({next});
    } else {
      next = model->nextTokens()[0];
    }
    if (!stream.accept(previous, next)) break;
    previous = next;
    model->decode();
  }
  cudaCheck(cudaStreamSynchronize(model->stream()), "generate");
  if (r.allReduce) r.allReduce->checkPeers();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (printer) std::printf("\n");
  if (r.rank == 0) {
    std::fprintf(stderr, "gpu: %s %s tp=%d: %d tokens, %.1f tokens/s\n", describeConfig(c).c_str(),
                 dtypeName(mo.dtype), r.size, stream.generated(),
                 stream.generated() / std::max(seconds, 1e-9));
    stream.noteContextEnd(o.steps, model->maxContext());
  }
  return 0;
}

// --- benchmark -------------------------------------------------------------

struct BenchResult {
  int batch = 0;
  double prefillTokensPerSec = 0, stepUs = 0, computeUs = -1, decodeTokensPerSec = 0, rooflinePct = 0;
};

// Every rank reaches this point before any continues (an all-reduce of one float).
void barrier(Rank& r, cudaStream_t stream, float* scratch) {
  if (r.allReduce) r.allReduce->sum(scratch, 1, DType::F32, stream);
  cudaCheck(cudaStreamSynchronize(stream), "barrier");
}

// Mean microseconds of `steps` decode steps from position `from`.
double timeDecode(GpuModel& model, Rank& r, int from, int steps, float* scratch) {
  model.rewind(from);
  for (int i = 0; i < 3; ++i) model.decode();  // warm up
  model.rewind(from);
  barrier(r, model.stream(), scratch);
  cudaEvent_t begin, end;
  cudaCheck(cudaEventCreate(&begin), "event");
  cudaCheck(cudaEventCreate(&end), "event");
  cudaCheck(cudaEventRecord(begin, model.stream()), "event");
  for (int i = 0; i < steps; ++i) model.decode();
  cudaCheck(cudaEventRecord(end, model.stream()), "event");
  cudaCheck(cudaEventSynchronize(end), "decode");
  if (r.allReduce) r.allReduce->checkPeers();
  float ms = 0;
  cudaCheck(cudaEventElapsedTime(&ms, begin, end), "event");
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return 1000.0 * ms / steps;
}

int bench(const EngineOptions& o, Rank& r) {
  JsonOutput json(r.rank == 0 ? o.jsonPath : "");
  int maxBatch = 1;
  for (int b : o.batches) maxBatch = std::max(maxBatch, b);
  GpuModelOptions mo;
  mo.dtype = pickDtype(o);
  mo.gemv = o.gemv;
  mo.fuseAllReduce = o.fuseAllReduce;
  mo.fuseNorm = o.fuseNorm;
  mo.maxSeqs = maxBatch;
  mo.maxTokens = maxBatch * o.promptLen;
  mo.maxContext = o.promptLen + std::max(o.decodeSteps, 3) + 8;
  ModelConfig c;
  std::unique_ptr<GpuModel> model = buildModel(o, r, mo, &c);
  void* scratchBytes = nullptr;
  cudaCheck(cudaMalloc(&scratchBytes, sizeof(float)), "cudaMalloc");
  cudaCheck(cudaMemsetAsync(scratchBytes, 0, sizeof(float), model->stream()), "cudaMemsetAsync");
  float* scratch = static_cast<float*>(scratchBytes);

  std::vector<BenchResult> results;
  for (int batch : o.batches) {
    BenchResult res;
    res.batch = batch;
    std::vector<std::vector<int>> prompts(batch, std::vector<int>(o.promptLen));
    uint64_t state = o.sampler.seed + 17;
    for (auto& p : prompts)
      for (int& t : p) t = int((state = state * 6364136223846793005ull + 1) >> 33) % c.vocab;

    model->prefill(prompts);  // warm up
    barrier(r, model->stream(), scratch);
    auto start = std::chrono::steady_clock::now();
    model->prefill(prompts);
    const double prefillSec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    res.prefillTokensPerSec = batch * o.promptLen / prefillSec;

    if (o.cudaGraph) model->captureDecodeGraph(true);
    res.stepUs = timeDecode(*model, r, o.promptLen, o.decodeSteps, scratch);
    if (o.cudaGraph && r.size > 1) {
      model->captureDecodeGraph(false);  // the same step without its all-reduces
      res.computeUs = timeDecode(*model, r, o.promptLen, o.decodeSteps, scratch);
    } else if (r.size == 1) {
      res.computeUs = res.stepUs;
    }
    model->dropDecodeGraph();
    if (o.profile) {
      model->rewind(o.promptLen);
      auto ops = model->profileDecode(std::min(o.decodeSteps, 20));
      if (r.rank == 0) {
        std::printf("eager decode step, batch %d, us per step by operation (rank 0):", batch);
        for (auto& op : ops) std::printf(" %s %.1f", op.first.c_str(), op.second);
        std::printf("\n");
      }
    }
    res.decodeTokensPerSec = batch * 1e6 / res.stepUs;
    const double bytes = double(model->weightBytes()) + double(model->kvBytesRead(o.promptLen + o.decodeSteps / 2));
    res.rooflinePct = 100.0 * bytes / (res.stepUs * 1e-6) / 4.3e12;
    results.push_back(res);
    barrier(r, model->stream(), scratch);
  }
  cudaFree(scratch);
  if (r.rank != 0) return 0;

  const std::string name = o.randomWeights ? o.shape : o.modelPath;
  const bool lone = r.skipped != nullptr;
  const char* collective = lone ? "skipped" : r.size > 1 ? o.collective.c_str() : "-";
  if (lone)
    std::printf("\nrank 0's shard of TP=%d alone on this GPU, its all-reduces skipped: the compute part of a "
                "TP=%d step\n", r.shards, r.shards);
  std::printf("\n%-10s %-4s %-3s %-10s %-5s %12s %10s %12s %10s %10s %9s\n", "shape", "type", "tp", "collective",
              "batch", "prefill t/s", "step us", "decode t/s", "ar us", "rest us", "hbm %");
  for (const BenchResult& res : results) {
    char ar[32] = "-", rest[32] = "-";
    if (res.computeUs >= 0) {
      if (!lone) std::snprintf(ar, sizeof ar, "%.1f", res.stepUs - res.computeUs);  // a lone shard skipped them
      std::snprintf(rest, sizeof rest, "%.1f", res.computeUs);
    }
    std::printf("%-10s %-4s %-3d %-10s %-5d %12.0f %10.1f %12.1f %10s %10s %9.1f\n", name.c_str(),
                dtypeName(mo.dtype), r.shards, collective, res.batch,
                res.prefillTokensPerSec, res.stepUs, res.decodeTokensPerSec, ar, rest, res.rooflinePct);
  }
  std::fflush(stdout);
  if (json.file) {
    for (const BenchResult& res : results)
      std::fprintf(json.file,
                   "{\"shape\":\"%s\",\"dtype\":\"%s\",\"tp\":%d,\"collective\":\"%s\",\"path\":\"%s\",\"batch\":%d,"
                   "\"prompt_len\":%d,\"decode_steps\":%d,\"cuda_graph\":%s,\"prefill_tokens_per_s\":%.1f,"
                   "\"decode_step_us\":%.2f,\"decode_tokens_per_s\":%.1f,\"compute_us\":%.2f,\"allreduce_us\":%.2f,"
                   "\"allreduces_per_step\":%d,\"fused_allreduce\":%s,\"fused_norm\":%s,\"weight_bytes_per_rank\":%zu,"
                   "\"hbm_roofline_pct\":%.1f,\"shard_only\":%s}\n",
                   jsonText(name).c_str(), dtypeName(mo.dtype), r.shards, lone || r.size > 1 ? collective : "none",
                   jsonText(r.path).c_str(), res.batch, o.promptLen, o.decodeSteps, o.cudaGraph ? "true" : "false",
                   res.prefillTokensPerSec, res.stepUs, res.decodeTokensPerSec, res.computeUs,
                   res.computeUs >= 0 && !lone ? res.stepUs - res.computeUs : -1.0, r.size > 1 ? 2 * c.layers : 0,
                   r.size > 1 && o.fuseAllReduce ? "true" : "false", o.fuseNorm ? "true" : "false",
                   model->weightBytes(), res.rooflinePct, lone ? "true" : "false");
    json.close();
  }
  return 0;
}

}  // namespace

bool gpuAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void requireGpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    throw EngineError(std::string("--device gpu: no usable CUDA GPU here (cudaGetDeviceCount: ") +
                      cudaGetErrorString(e) + ")");
  if (n == 0) throw EngineError("--device gpu: this machine has no CUDA GPU");
}

int runGpu(const EngineOptions& o, int argc, char** argv) {
  if (o.tp > 1 && o.rank < 0) {
    // ROCENANTE_DISABLE=1 sends every call of the children's communicators to NCCL.
    if (o.collective == "nccl") setenv("ROCENANTE_DISABLE", "1", 1);
    rcnUniqueId id;
    rcnCheck(rcnGetUniqueId(&id), "rcnGetUniqueId");
    return launchRanks(o, argc, argv, id);
  }
  if (o.collective == "nccl") setenv("ROCENANTE_DISABLE", "1", 1);
  Rank r;
  setupRank(o, r);
  return o.bench ? bench(o, r) : generate(o, r);
}

}  // namespace engine
