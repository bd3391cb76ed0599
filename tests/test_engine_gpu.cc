// SPDX-License-Identifier: BSD-3-Clause
// The engine's GPU path against its CPU reference: stories260K (interleaved
// RoPE, grouped-query attention) and a random Qwen3-style model (q/k norm,
// rotate-half RoPE), batched prefill, CUDA-graph decode, bf16 decode of 1-2
// sequences (CUDA-core GEMV; the plain products of 2 on tensor cores) and
// 3-8 (tensor-core GEMV), TP = 2 over the
// rcn API (rocenante, then NCCL through ROCENANTE_DISABLE=1) against TP = 1,
// and TP = 3-8 with the ranks as threads sharing one GPU. Every case runs in
// forked ranks so that the parent never touches CUDA.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "allreduce_hook.h"
#include "attention_plan.h"
#include "cpu_model.h"
#include "gpu_model.h"
#include "llama2c_loader.h"
#include "rcn_allreduce.h"
#include "sampler.h"
#include "shapes.h"
#include "support/gpu_case.h"
#include "support/rank_checks.h"
#include "support/reference.h"
#include "support/shared_model.h"
#include "support/timeout_scale.h"
#include "tokenizer.h"

using namespace engine;

namespace {

bool haveStories() {
  return !rcn::test::sharedModelPath("stories260K.bin").empty() && !rcn::test::sharedModelPath("tok512.bin").empty();
}

double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  return worst;
}

struct Run {
  const ModelWeights* weights;
  std::vector<std::vector<int>> prompts;  // one per sequence, equal lengths
  int decodeSteps = 20;
  DType dtype = DType::F32;
  double tolerance = 2e-3;  // on logits, absolute
  bool graph = true;
  int attentionSplits = 0;  // GpuModelOptions::attentionSplits
  int attentionBlocksPerSm = 0;  // GpuModelOptions::attentionBlocksPerSm
  int maxContext = 0;            // 0: room for the prompt and the steps (at least 128)
  bool fuseAllReduce = false;    // GpuModelOptions::fuseAllReduce
  bool fuseNorm = false;         // GpuModelOptions::fuseNorm
};

// Runs `run` on this rank's GPU (shard rank of size) and checks every step's
// logits against one CPU model per sequence (TP = 1, fp32). Returns 0 when all agree.
int compareWithCpu(const Run& run, int rank, int size, GpuAllReduce* allReduce) {
  const ModelConfig& c = run.weights->config;
  const int seqs = int(run.prompts.size()), length = int(run.prompts[0].size());
  ShardLayout layout = planShard(c, size, rank);
  GpuModelOptions mo;
  mo.dtype = run.dtype;
  mo.maxSeqs = seqs;
  mo.maxTokens = seqs * length;
  mo.maxContext = run.maxContext ? run.maxContext : std::min(c.seqLen, std::max(128, length + run.decodeSteps + 1));
  mo.attentionSplits = run.attentionSplits;
  mo.attentionBlocksPerSm = run.attentionBlocksPerSm;
  mo.fuseAllReduce = run.fuseAllReduce;
  mo.fuseNorm = run.fuseNorm;
  GpuModel gpu(c, layout, mo, allReduce);
  gpu.loadWeights(shardWeights(*run.weights, layout));

  std::vector<std::unique_ptr<CpuTpModel>> cpu;
  std::vector<std::vector<float>> expected(seqs);
  for (int b = 0; b < seqs; ++b) {
    cpu.push_back(std::make_unique<CpuTpModel>(*run.weights, 1));
    for (int pos = 0; pos < length; ++pos) expected[b] = cpu[b]->forward(run.prompts[b][pos], pos);
  }
  gpu.prefill(run.prompts);
  if (run.graph) gpu.captureDecodeGraph();
  int failures = 0;
  for (int step = 0; step <= run.decodeSteps; ++step) {
    std::vector<int> next = gpu.nextTokens();
    for (int b = 0; b < seqs; ++b) {
      std::vector<float> logits = gpu.logits(b);
      const double diff = maxAbsDiff(logits, expected[b]);
      const int cpuToken = argmax(expected[b].data(), c.vocab);
      // In bf16 a near tie may flip; the GPU's pick must then be as good within tolerance.
      const bool tokenOk = next[b] == cpuToken || expected[b][next[b]] >= expected[b][cpuToken] - run.tolerance;
      if (diff > run.tolerance || !tokenOk) {
        std::printf("rank %d step %d seq %d: max |logit diff| %.3g (tolerance %.3g), gpu token %d cpu token %d\n",
                    rank, step, b, diff, run.tolerance, next[b], cpuToken);
        if (++failures > 5) return 1;
      }
      if (step < run.decodeSteps) expected[b] = cpu[b]->forward(next[b], length + step);
    }
    if (step < run.decodeSteps) gpu.decode();
  }
  return failures ? 1 : 0;
}

// The unique id travels from rank 0 to the others through a pipe made before the fork.
void runTp(int size, bool ncclOnly, const std::function<int(int, GpuAllReduce*)>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  auto outcomes = rcn::test::runRanks(size, [&](int rank) -> int {
    try {
      if (ncclOnly) setenv("ROCENANTE_DISABLE", "1", 1);
      if (cudaSetDevice(rcn::test::rankDevice(rank)) != cudaSuccess) return 2;
      rcnUniqueId id;
      if (rank == 0) {
        rcnCheck(rcnGetUniqueId(&id), "rcnGetUniqueId");
        for (int r = 1; r < size; ++r)
          if (write(fds[1], &id, sizeof id) != ssize_t(sizeof id)) return 3;
      } else if (read(fds[0], &id, sizeof id) != ssize_t(sizeof id)) {
        return 3;
      }
      rcnComm_t comm;
      rcnCheck(rcnCommInitRank(&comm, size, id, rank), "rcnCommInitRank");
      int result;
      {
        RcnAllReduce allReduce(comm);
        result = body(rank, &allReduce);
      }
      rcnCheck(rcnCommDestroy(comm), "rcnCommDestroy");
      return result;
    } catch (const std::exception& e) {
      std::printf("rank %d: %s\n", rank, e.what());
      return 1;
    }
  });
  close(fds[0]);
  close(fds[1]);
  rcn::test::checkRanks(outcomes);
}

// N ranks as N threads sharing one GPU, so that TP > 2 runs where fewer GPUs
// are lent: each all-reduce waits for the rank's stream, combines the ranks'
// values on the host (LocalAllReduce, in rank order; bf16 summed in fp32 and
// rounded once) and copies the result back. Eager steps only: a graph cannot
// capture the host's part.
class ThreadRankAllReduce : public GpuAllReduce {
 public:
  ThreadRankAllReduce(LocalAllReduce& group, int rank) : group_(group), rank_(rank) {}

  void sum(void* data, size_t count, DType type, cudaStream_t stream) override {
    std::vector<float> values(count);
    if (type == DType::F32) {
      copy(values.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost, stream);
    } else {
      std::vector<uint16_t> bits(count);
      copy(bits.data(), data, count * 2, cudaMemcpyDeviceToHost, stream);
      for (size_t i = 0; i < count; ++i) values[i] = float(rcn::test::bf16ToDouble(bits[i]));
    }
    group_.rank(rank_).sum(values.data(), count);
    if (type == DType::F32) {
      copy(data, values.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream);
    } else {
      std::vector<uint16_t> bits(count);
      for (size_t i = 0; i < count; ++i) bits[i] = rcn::test::doubleToBf16(values[i]);
      copy(data, bits.data(), count * 2, cudaMemcpyHostToDevice, stream);
    }
  }

  void maxKeys(uint64_t* keys, size_t count, cudaStream_t stream) override {
    std::vector<uint64_t> mine(count), best(count, 0);
    copy(mine.data(), keys, count * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream);
    group_.combine(rank_, mine.data(), count * sizeof(uint64_t), [&](const std::vector<const void*>& all) {
      for (const void* p : all)
        for (size_t i = 0; i < count; ++i) best[i] = std::max(best[i], static_cast<const uint64_t*>(p)[i]);
    });
    copy(keys, best.data(), count * sizeof(uint64_t), cudaMemcpyHostToDevice, stream);
  }

 private:
  static void copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    if (cudaMemcpyAsync(to, from, bytes, kind, stream) != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess)
      throw EngineError("the host all-reduce's copy failed");
  }

  LocalAllReduce& group_;
  int rank_;
};

// Runs body(rank, allReduce) for every rank of `size` on threads of this
// process, all on GPU 0; returns the number of ranks that failed. A failing
// rank leaves the group, so that the others stop at their next all-reduce
// instead of waiting for it; one that stops without failing is given up on
// after 30 s, well inside the forked rank's 120 s.
int runTpThreads(int size, const std::function<int(int, GpuAllReduce*)>& body) {
  LocalAllReduce group(size, std::chrono::milliseconds(rcn::test::scaledMs(30000)));
  std::vector<int> results(size, 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadRankAllReduce allReduce(group, r);
        results[r] = body(r, &allReduce);
      } catch (const std::exception& e) {
        std::printf("rank %d of %d: %s\n", r, size, e.what());
      } catch (...) {
        std::printf("rank %d of %d: an exception that is not a std::exception\n", r, size);
      }
      if (results[r] != 0) group.abandon();
    });
  for (auto& t : threads) t.join();
  return int(std::count_if(results.begin(), results.end(), [](int v) { return v != 0; }));
}

const ModelWeights& stories() {
  static ModelWeights w = loadLlama2c(rcn::test::requireSharedModel("stories260K.bin"));
  return w;
}

std::vector<int> storyPrompt() {
  static Llama2cTokenizer tok(rcn::test::requireSharedModel("tok512.bin"), 512);
  return tok.encode("Once upon a time", true);
}

}  // namespace

TEST_CASE("GPU matches the CPU reference on stories260K (fp32, graph)", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  Run run{&stories(), {storyPrompt()}, 100};
  rcn::test::checkInOneRank([&] { return compareWithCpu(run, 0, 1, nullptr); });
  run.graph = false;
  run.attentionSplits = 2;  // the two splits' merge, on positions 0..104
  rcn::test::checkInOneRank([&] { return compareWithCpu(run, 0, 1, nullptr); });
}

TEST_CASE("GPU bf16 stays within bf16 tolerance of the CPU reference", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  Run run{&stories(), {storyPrompt()}, 10, DType::BF16, 0.5};
  rcn::test::checkInOneRank([&] { return compareWithCpu(run, 0, 1, nullptr); });
}

TEST_CASE("GPU batched prefill and decode of a random Qwen3-style model", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  ModelWeights m = randomWeights(shapeConfig("tiny-qwen3"), 5);
  Run run{&m, {{1, 7, 99, 3, 200}, {1, 8, 100, 4, 201}, {1, 250, 2, 9, 77}}, 12};
  rcn::test::checkInOneRank([&] { return compareWithCpu(run, 0, 1, nullptr); });
}

// A model with q/k/v biases (Qwen2) and one with a rescaled RoPE table (Llama 3.1 style).
static ModelWeights scaledRopeLlama(uint64_t seed) {
  ModelConfig c = shapeConfig("tiny-llama");
  c.ropeFreqs = ropeInverseFrequencies(c);
  for (size_t i = 1; i < c.ropeFreqs.size(); ++i) c.ropeFreqs[i] /= 2 + i;
  return randomWeights(c, seed);
}

TEST_CASE("GPU q/k/v biases and a RoPE frequency table match the CPU reference", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  ModelWeights qwen2 = randomWeights(shapeConfig("tiny-qwen2"), 6);
  ModelWeights scaled = scaledRopeLlama(7);
  for (const ModelWeights* m : {&qwen2, &scaled}) {
    Run run{m, {{1, 7, 99, 3, 200}, {1, 8, 100, 4, 201}}, 12};
    rcn::test::checkInOneRank([&] { return compareWithCpu(run, 0, 1, nullptr); });
  }
}

// Head sizes of real models (128 as Llama 3 8B, 64 as Llama 3.2 1B): the
// attention kernel's vector loads and key-row sharing at those sizes, past
// 64 positions (two splits), fp32 and bf16 (the fused GEMV paths), batch 1 and 2.
static ModelWeights realHeadSize(int headDim, uint64_t seed) {
  ModelConfig c = shapeConfig("tiny-llama");
  c.headDim = headDim, c.heads = 256 / headDim, c.kvHeads = c.heads / 2 > 0 ? c.heads / 2 : 1;
  c.dim = 256, c.hidden = 256, c.layers = 2, c.ropeInterleaved = false;
  return randomWeights(c, seed);
}

TEST_CASE("GPU attention at head sizes 64 and 128 matches the CPU reference", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  // One section per head size and type, so that a sanitizer can take them
  // one at a time (-c "head size 128 bf16").
  for (int headDim : {64, 128}) {
    ModelWeights m = realHeadSize(headDim, 20 + headDim);
    DYNAMIC_SECTION("head size " << headDim << " fp32") {
      Run fp32{&m, {{1, 7, 99, 3}}, 90};
      rcn::test::checkInOneRank([&] { return compareWithCpu(fp32, 0, 1, nullptr); });
      // Split attention and its merge across the cluster: spans of 1 (splits
      // past the position left empty) up to 32 positions (3 splits), and the
      // most splits; both kernel builds (one and two blocks per SM).
      for (int splits : {3, kAttentionMaxSplits})
        for (int blocksPerSm : {1, 2}) {
          INFO(splits << " attention splits, " << blocksPerSm << " blocks per SM");
          fp32.attentionSplits = splits;
          fp32.attentionBlocksPerSm = blocksPerSm;
          rcn::test::checkInOneRank([&] { return compareWithCpu(fp32, 0, 1, nullptr); });
        }
    }
    DYNAMIC_SECTION("head size " << headDim << " bf16") {
      Run bf16{&m, {{1, 7, 99, 3}, {1, 8, 100, 4}}, 70, DType::BF16, 0.5};
      rcn::test::checkInOneRank([&] { return compareWithCpu(bf16, 0, 1, nullptr); });
      bf16.attentionSplits = 5;
      rcn::test::checkInOneRank([&] { return compareWithCpu(bf16, 0, 1, nullptr); });
      bf16.attentionBlocksPerSm = 2;
      rcn::test::checkInOneRank([&] { return compareWithCpu(bf16, 0, 1, nullptr); });
      bf16.attentionBlocksPerSm = 0;
      bf16.attentionSplits = 0;
      bf16.prompts.pop_back();
      rcn::test::checkInOneRank([&] { return compareWithCpu(bf16, 0, 1, nullptr); });
    }
  }
}

// 0 when making a TP=1 model of config with mo throws an EngineError whose
// message holds `expected`.
static int refused(const ModelConfig& config, const GpuModelOptions& mo, const std::string& expected) {
  try {
    GpuModel gpu(config, planShard(config, 1, 0), mo, nullptr);
  } catch (const EngineError& e) {
    if (std::string(e.what()).find(expected) != std::string::npos) return 0;
    std::printf("wrong error: %s\n", e.what());
    return 1;
  }
  std::printf("not refused: %s\n", expected.c_str());
  return 1;
}

// Options the GPU path cannot honour are refused by name when the model is
// made: an attention split count out of range, a kernel build that does not
// exist (blocks per SM), a context whose unsplit (prefill) attention block
// would not fit in shared memory.
TEST_CASE("GPU model refuses attention options it cannot run", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  ModelConfig c = realHeadSize(128, 7).config;
  auto check = [&](const GpuModelOptions& mo, const std::string& expected) {
    rcn::test::checkInOneRank([&] { return refused(c, mo, expected); });
  };
  GpuModelOptions mo;
  mo.maxContext = c.seqLen;
  mo.attentionSplits = kAttentionMaxSplits + 1;
  check(mo, "attention splits " + std::to_string(kAttentionMaxSplits + 1));
  mo.attentionSplits = -1;
  check(mo, "attention splits -1");
  mo.attentionSplits = 0;
  mo.attentionBlocksPerSm = 3;
  check(mo, "attention blocks per SM 3");
  mo.attentionBlocksPerSm = 0;
  c.seqLen = mo.maxContext = 1 << 20;
  check(mo, "KB of shared memory a block");
}

// The longest context the shared-memory check accepts must run: its unsplit
// (prefill) attention block, static arrays included, fits the GPU's per-block
// limit; four positions more are refused.
TEST_CASE("GPU attention runs at the longest context its shared-memory check accepts", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  ModelWeights m = realHeadSize(128, 11);
  rcn::test::checkInOneRank([&] {
    int allowed = 0;
    if (cudaDeviceGetAttribute(&allowed, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) != cudaSuccess) return 1;
    const int headDim = m.config.headDim;
    auto fits = [&](int context) { return attentionLargestBlockBytes(context, headDim) <= size_t(allowed); };
    int longest = 4;  // scores are laid out 4 at a time
    while (fits(longest + 4)) longest += 4;
    std::printf("longest context %d (per-block shared memory %d bytes)\n", longest, allowed);
    m.config.seqLen = longest + 4;
    Run run{&m, {{1, 7, 99, 3}}, 4};
    run.maxContext = longest;
    if (compareWithCpu(run, 0, 1, nullptr) != 0) return 1;
    GpuModelOptions mo;
    mo.maxContext = longest + 4;
    return refused(m.config, mo, "KB of shared memory a block");
  });
}

// `seqs` different prompts of 4 tokens below `vocab`.
static std::vector<std::vector<int>> fourTokenPrompts(int seqs, int vocab) {
  std::vector<std::vector<int>> prompts;
  for (int b = 0; b < seqs; ++b) prompts.push_back({1, (7 + 31 * b) % vocab, (99 + 17 * b) % vocab, (3 + 5 * b) % vocab});
  return prompts;
}

// Batches of 3-8 in bf16 decode through the tensor-core GEMV (gemv_mma.cu):
// every product of the step, with the norm fused in front, SwiGLU behind, and
// the QKV epilogue (rotate-half and interleaved RoPE, a frequency table,
// biases); Qwen3's q/k norm keeps its QKV product plain. Graph and eager.
TEST_CASE("GPU bf16 decode of 3-8 sequences (tensor-core GEMV) matches the CPU reference", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  ModelWeights head64 = realHeadSize(64, 40), head128 = realHeadSize(128, 41);
  ModelWeights qwen2 = randomWeights(shapeConfig("tiny-qwen2"), 42);
  ModelWeights qwen3 = randomWeights(shapeConfig("tiny-qwen3"), 43);
  ModelWeights scaled = scaledRopeLlama(44);
  const std::pair<const ModelWeights*, int> runs[] = {{&head64, 5}, {&head128, 8}, {&qwen2, 3}, {&qwen3, 3}, {&scaled, 4}};
  for (auto [m, seqs] : runs) {
    INFO(seqs << " sequences, head size " << m->config.headDim);
    Run run{m, fourTokenPrompts(seqs, m->config.vocab), 20, DType::BF16, 0.5};
    rcn::test::checkInOneRank([&] { return compareWithCpu(run, 0, 1, nullptr); });
  }
  Run eager{&head64, fourTokenPrompts(6, head64.config.vocab), 12, DType::BF16, 0.5};
  eager.graph = false;
  rcn::test::checkInOneRank([&] { return compareWithCpu(eager, 0, 1, nullptr); });
}

TEST_CASE("GPU TP=2 over rcnAllReduce matches TP=1", "[engine][gpu]") {
  rcn::test::requireGpus(2);
  ModelWeights llama = randomWeights(shapeConfig("tiny-llama"), 9);
  ModelWeights qwen = randomWeights(shapeConfig("tiny-qwen3"), 10);
  ModelWeights qwen2 = randomWeights(shapeConfig("tiny-qwen2"), 11);
  ModelWeights scaled = scaledRopeLlama(12);
  std::vector<Run> runs = {Run{&llama, {{1, 7, 99, 3}, {1, 5, 6, 250}}, 10}, Run{&qwen, {{1, 7, 99, 3}}, 10},
                           Run{&qwen2, {{1, 7, 99, 3}}, 10}, Run{&scaled, {{1, 7, 99, 3}}, 10}};
  if (haveStories()) runs.push_back(Run{&stories(), {storyPrompt(), storyPrompt()}, 30});
  // Two ranks on one GPU (ROCENANTE_TEST_SHARE_GPUS): no NCCL, which refuses that.
  const bool shared = rcn::test::gpuCount() < 2;
  rcn::test::NativeNcclUnlessShared ncclRule(2);
  for (bool ncclOnly : {false, true}) {
    if (ncclOnly && shared) {
      WARN("two ranks share one GPU: the run over NCCL is left out");
      continue;
    }
    INFO((ncclOnly ? "ROCENANTE_DISABLE=1 (NCCL)" : "rocenante"));
    for (const Run& run : runs)
      runTp(2, ncclOnly, [&](int rank, GpuAllReduce* ar) { return compareWithCpu(run, rank, 2, ar); });
  }
  // bf16 decode of 1-2 tokens sums its all-reduces inside the GEMVs through
  // rocenante's device API (the p2p path, forced here, has it); the same
  // with rcnAllReduce. The device API's call counter says which ran.
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  setenv("ROCENANTE_TRANSPORT", "p2p", 1);
  for (bool fuse : {true, false}) {
    INFO((fuse ? "fused all-reduce" : "rcnAllReduce"));
    for (auto prompts : {std::vector<std::vector<int>>{{1, 7, 99, 3}}, {{1, 7, 99, 3}, {1, 5, 6, 250}}}) {
      Run bf16{&llama, prompts, 10, DType::BF16, 0.5};
      bf16.fuseAllReduce = fuse;
      runTp(2, false, [&](int rank, GpuAllReduce* ar) {
        if (!ar->exchange()) {
          std::printf("rank %d: the p2p path offers no device API\n", rank);
          return 1;
        }
        if (compareWithCpu(bf16, rank, 2, ar) != 0) return 1;
        uint32_t calls = 0;
        if (cudaMemcpy(&calls, ar->exchange()->calls, sizeof calls, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
        if ((calls > 0) != fuse) {
          std::printf("rank %d: %u device-API calls with fusing %s\n", rank, calls, fuse ? "on" : "off");
          return 1;
        }
        return 0;
      });
    }
  }
  unsetenv("ROCENANTE_FORCE");
  unsetenv("ROCENANTE_TRANSPORT");
  // A bf16 residual stream, each all-reduce adding it and normalizing it in
  // one call (rcnAllReduceResidualRmsNorm: the fused kernel on p2p), for 1,
  // 2 and 5 sequences, eagerly (prefill) and in graphs (decode); then over
  // NCCL's all-reduce and rocenante's norm kernel where each rank has a GPU.
  for (bool ncclOnly : {false, true}) {
    if (ncclOnly && shared) continue;
    INFO((ncclOnly ? "fused norm over NCCL" : "fused norm"));
    for (auto prompts : {std::vector<std::vector<int>>{{1, 7, 99, 3}},
                         {{1, 7, 99, 3}, {1, 5, 6, 250}},
                         fourTokenPrompts(5, llama.config.vocab)}) {
      Run bf16{&llama, prompts, 10, DType::BF16, 0.5};
      bf16.fuseNorm = true;
      runTp(2, ncclOnly, [&](int rank, GpuAllReduce* ar) { return compareWithCpu(bf16, rank, 2, ar); });
    }
  }
  Run bf16Batch{&llama, fourTokenPrompts(5, llama.config.vocab), 10, DType::BF16, 0.5};  // tensor-core GEMV
  runTp(2, false, [&](int rank, GpuAllReduce* ar) { return compareWithCpu(bf16Batch, rank, 2, ar); });
}

// A tiny llama of `heads` query and `kvHeads` KV heads, MLP size 32 a head,
// so that it splits over up to `heads` ranks.
ModelWeights headsLlama(int heads, int kvHeads, uint64_t seed) {
  ModelConfig c = shapeConfig("tiny-llama");
  c.heads = heads, c.kvHeads = kvHeads, c.headDim = 16, c.dim = 16 * heads, c.hidden = 32 * heads;
  return randomWeights(c, seed);
}

// TP = 3, 4 and 8 on one GPU, the ranks as threads (ThreadRankAllReduce):
// the shard plan (KV heads split at 3, replicated at 4 and 8), the
// vocab-parallel head and its argmax over uneven slices, and the gathered
// logits, in fp32 (cuBLAS) and bf16 (the GEMV kernels: 1-2 tokens on CUDA
// cores but the plain products of 2, 3 on tensor cores), against the CPU
// reference at TP = 1.
TEST_CASE("GPU TP=3 to TP=8 as threads on one GPU matches TP=1", "[engine][gpu]") {
  rcn::test::requireGpus(1);
  ModelWeights qwen3 = randomWeights(shapeConfig("tiny-qwen3"), 21);
  ModelWeights qwen2 = randomWeights(shapeConfig("tiny-qwen2"), 22);
  ModelWeights six = headsLlama(6, 3, 23), eight = headsLlama(8, 2, 24);
  struct Case {
    const ModelWeights* weights;
    int size;
    DType dtype;
    int seqs;
  };
  const Case cases[] = {{&qwen3, 4, DType::F32, 1}, {&qwen3, 4, DType::BF16, 2}, {&qwen2, 4, DType::F32, 2},
                        {&qwen2, 4, DType::BF16, 3}, {&six, 3, DType::F32, 1},   {&six, 3, DType::BF16, 1},
                        {&eight, 8, DType::F32, 2},  {&eight, 8, DType::BF16, 1}, {&eight, 8, DType::BF16, 3}};
  for (const Case& c : cases) {
    INFO(c.weights->config.arch << " " << c.weights->config.heads << " heads, TP=" << c.size
                                << (c.dtype == DType::F32 ? " fp32, " : " bf16, ") << c.seqs << " sequence(s)");
    Run run{c.weights, fourTokenPrompts(c.seqs, c.weights->config.vocab), 8, c.dtype,
            c.dtype == DType::F32 ? 2e-3 : 0.5};
    run.graph = false;
    rcn::test::checkInOneRank([&] {
      return runTpThreads(c.size, [&](int rank, GpuAllReduce* ar) { return compareWithCpu(run, rank, c.size, ar); });
    });
  }
  // A shape that does not split is refused on every rank, by name.
  rcn::test::checkInOneRank([&] {
    return runTpThreads(3, [&](int rank, GpuAllReduce* ar) {
      Run run{&qwen3, {{1, 7, 99, 3}}, 2};
      run.graph = false;
      try {
        compareWithCpu(run, rank, 3, ar);
      } catch (const EngineError& e) {
        return std::string(e.what()).find("query heads do not divide") != std::string::npos ? 0 : 1;
      }
      return 1;
    });
  });
}
