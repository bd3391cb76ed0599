// SPDX-License-Identifier: BSD-3-Clause
// The Hugging Face checkpoint loader (examples/engine/hf): random small
// models of every supported architecture written by test_engine_hf_writer
// load back exactly (F32) or to BF16 rounding, tensor-parallel shard loads
// equal shardWeights of the full load, bad inputs give clear errors, and a
// loaded model's TP=2 logits (from per-rank shard loads) match TP=1.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint.h"
#include "cpu_model.h"
#include "hf_loader.h"
#include "mapped_read.h"
#include "safetensors.h"
#include "shapes.h"
#include "shard.h"
#include "test_engine_hf_writer.h"
#include "text_codec.h"
#include "test_engine_naive.h"

using namespace engine;
using Catch::Matchers::ContainsSubstring;

namespace {

// A fresh directory for one test, removed at scope exit.
struct TempDir {
  std::string path = hftest::makeTempDir();
  ~TempDir() { hftest::removeDir(path); }
};

// Small but not trivial: grouped-query attention (4 query heads over 2 KV
// heads) so TP=2 splits KV heads and TP=4 replicates them.
ModelConfig smallConfig(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.dim = 32;
  c.hidden = 48;
  c.layers = 2;
  c.heads = 4;
  c.kvHeads = 2;
  c.headDim = arch == "qwen3" ? 16 : 8;  // Qwen3 states a head_dim other than dim/heads
  c.vocab = 40;
  c.seqLen = 32;
  c.normEps = 1e-6f;
  c.ropeTheta = arch == "llama" ? 500000.0f : 1000000.0f;
  c.ropeInterleaved = false;
  c.qkNorm = arch == "qwen3";
  c.qkvBias = arch == "qwen2";
  c.tiedClassifier = arch == "qwen3";
  return c;
}

void requireSame(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
  REQUIRE(mismatches == 0);
}

void requireSameWeights(const ModelWeights& got, const ModelWeights& want) {
  REQUIRE(describeConfig(got.config) == describeConfig(want.config));
  requireSame(got.embedding, want.embedding, "embedding");
  requireSame(got.finalNorm, want.finalNorm, "final norm");
  requireSame(got.classifier, want.classifier, "classifier");
  REQUIRE(got.layers.size() == want.layers.size());
  for (size_t i = 0; i < got.layers.size(); ++i) {
    const LayerWeights &g = got.layers[i], &w = want.layers[i];
    const std::string l = "layer " + std::to_string(i) + " ";
    requireSame(g.attnNorm, w.attnNorm, l + "attnNorm");
    requireSame(g.ffnNorm, w.ffnNorm, l + "ffnNorm");
    requireSame(g.wq, w.wq, l + "wq");
    requireSame(g.wk, w.wk, l + "wk");
    requireSame(g.wv, w.wv, l + "wv");
    requireSame(g.wo, w.wo, l + "wo");
    requireSame(g.wGate, w.wGate, l + "wGate");
    requireSame(g.wUp, w.wUp, l + "wUp");
    requireSame(g.wDown, w.wDown, l + "wDown");
    requireSame(g.qNorm, w.qNorm, l + "qNorm");
    requireSame(g.kNorm, w.kNorm, l + "kNorm");
    requireSame(g.bq, w.bq, l + "bq");
    requireSame(g.bk, w.bk, l + "bk");
    requireSame(g.bv, w.bv, l + "bv");
  }
}

// What a `dtype` checkpoint of `w` holds, as float32.
ModelWeights roundedTo(const std::string& dtype, ModelWeights w) {
  auto r = [&](std::vector<float>& v) { v = hftest::roundTo(dtype, v); };
  r(w.embedding), r(w.finalNorm), r(w.classifier);
  for (LayerWeights& l : w.layers) {
    r(l.attnNorm), r(l.ffnNorm), r(l.wq), r(l.wk), r(l.wv), r(l.wo), r(l.wGate), r(l.wUp), r(l.wDown);
    r(l.qNorm), r(l.kNorm), r(l.bq), r(l.bk), r(l.bv);
  }
  return w;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const EngineError& e) {
    return e.what();
  }
  return "(no error)";
}

void writeText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("bf16 and f16 conversions") {
  CHECK(hf::bf16ToFloat(0x3f80) == 1.0f);
  CHECK(hf::bf16ToFloat(0xc000) == -2.0f);
  CHECK(hf::floatToBf16(1.0f) == 0x3f80);
  CHECK(hf::floatToBf16(1.00390625f) == 0x3f80);  // halfway: rounds to even
  CHECK(hf::floatToBf16(1.01171875f) == 0x3f82);  // halfway: rounds to even (up)
  CHECK(hf::f16ToFloat(0x3c00) == 1.0f);
  CHECK(hf::f16ToFloat(0xc000) == -2.0f);
  CHECK(hf::f16ToFloat(0x7bff) == 65504.0f);
  CHECK(hf::f16ToFloat(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(hf::f16ToFloat(0x0200) == std::ldexp(1.0f, -15));
  CHECK(std::isinf(hf::f16ToFloat(0x7c00)));
  CHECK(std::isnan(hf::f16ToFloat(0x7e00)));
}

TEST_CASE("every architecture loads back what was written, F32 exactly, BF16 and F16 rounded") {
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3"}) {
    for (const char* dtype : {"F32", "BF16", "F16"}) {
      for (int shards : {1, 3}) {
        DYNAMIC_SECTION(arch << " " << dtype << " shards=" << shards) {
          TempDir dir;
          const ModelWeights written = randomWeights(smallConfig(arch), 7);
          hftest::WriteOptions o;
          o.architecture = hftest::architectureOf(arch);
          o.dtype = dtype;
          o.shards = shards;
          hftest::writeHfModel(dir.path, written, o);

          const hf::HfModel loaded = hf::loadHfModel(dir.path, 0);
          CHECK(loaded.hf.architecture == o.architecture);
          CHECK(loaded.hf.bosToken == 1);
          CHECK(loaded.hf.eosTokens == std::vector<int>{2, 3});
          requireSameWeights(loaded.weights, roundedTo(dtype, written));
          CHECK(loaded.weights.config.qkvBias == (std::string(arch) == "qwen2"));  // biases compared above
          CHECK(loaded.hf.unsupported.empty());
        }
      }
    }
  }
}

TEST_CASE("BF16 and F16 rounding stay within half a step") {
  const ModelWeights w = randomWeights(smallConfig("llama"), 11);
  const std::vector<float>& x = w.layers[0].wq;
  const std::vector<float> b = hftest::roundTo("BF16", x), h = hftest::roundTo("F16", x);
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(std::fabs(b[i] - x[i]) <= std::ldexp(std::fabs(x[i]), -8));
    REQUIRE(std::fabs(h[i] - x[i]) <= std::max(std::ldexp(std::fabs(x[i]), -11), std::ldexp(1.0f, -25)));
  }
  CHECK(hftest::floatToF16(1.0f) == 0x3c00);
  CHECK(hftest::floatToF16(-2.0f) == 0xc000);
  CHECK(hftest::floatToF16(65504.0f) == 0x7bff);
  CHECK(hftest::floatToF16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(hftest::floatToF16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // halfway: to even
}

TEST_CASE("config.json maps onto ModelConfig") {
  TempDir dir;
  ModelConfig c = smallConfig("qwen3");
  c.seqLen = 4096;
  hftest::WriteOptions o;
  o.architecture = "Qwen3ForCausalLM";
  hftest::writeHfModel(dir.path, randomWeights(c, 1), o);
  const hf::HfConfig hf = hf::readHfConfig(dir.path, 128);
  CHECK(hf.config.arch == "qwen3");
  CHECK(hf.config.headDim == 16);
  CHECK(hf.config.seqLen == 128);  // capped by the argument
  CHECK(hf.config.qkNorm);
  CHECK(!hf.config.ropeInterleaved);
  CHECK(hf.config.tiedClassifier);
  CHECK(hf.config.ropeTheta == 1000000.0f);
  CHECK(hf.config.normEps == 1e-6f);
  CHECK(hf::readHfConfig(dir.path, 0).config.seqLen == 4096);
}

TEST_CASE("Llama 3.1 rope_scaling is parsed, reported, and turned into frequencies") {
  TempDir dir;
  ModelConfig c = smallConfig("llama");
  c.dim = 128, c.heads = 2, c.kvHeads = 1, c.headDim = 64;
  hftest::writeHfModel(dir.path, randomWeights(c, 1), {});
  std::string config = readText(dir.path + "/config.json");
  config.replace(config.find("\"rope_scaling\": null"), 20,
                 "\"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
                 "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}");
  writeText(dir.path + "/config.json", config);
  const hf::HfConfig hf = hf::readHfConfig(dir.path, 0);
  CHECK(hf.rope.type == "llama3");
  CHECK(hf.rope.factor == 32.0);
  CHECK_NOTHROW(hf::requireEngineSupport(hf));  // the engine's RoPE takes the table
  const std::vector<double> f = hf::ropeFrequencies(hf);
  REQUIRE(hf.config.ropeFreqs.size() == f.size());
  for (size_t i = 0; i < f.size(); ++i) CHECK(hf.config.ropeFreqs[i] == float(f[i]));
  REQUIRE(f.size() == 32);
  CHECK(f[0] == 1.0);                                            // short wavelength: kept
  CHECK(std::fabs(f[31] / (std::pow(500000.0, -62.0 / 64) / 32) - 1) < 1e-12);  // long: slowed 32x
  // i = 16: wavelength 2*pi*sqrt(500000) = 4442.9 lies between 8192/4 and 8192,
  // smooth = (8192/4442.9 - 1)/3, blended from f/32 and f.
  CHECK(std::fabs(f[16] - 0.00042955679655936815) < 1e-12);

  // Without one of its fields (transformers would raise), and with values the forward pass cannot use.
  const std::string full = readText(dir.path + "/config.json");
  auto errorWith = [&](const std::string& from, const std::string& to) {
    std::string edited = full;
    REQUIRE(edited.find(from) != std::string::npos);
    edited.replace(edited.find(from), from.size(), to);
    writeText(dir.path + "/config.json", edited);
    try {
      hf::readHfConfig(dir.path, 0);
    } catch (const EngineError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(errorWith("\"low_freq_factor\": 1.0, ", ""), ContainsSubstring("low_freq_factor"));
  CHECK_THAT(errorWith("\"low_freq_factor\": 1.0", "\"low_freq_factor\": 0"), ContainsSubstring("low_freq_factor must be positive"));
  CHECK_THAT(errorWith("\"original_max_position_embeddings\": 8192", "\"original_max_position_embeddings\": -100"),
             ContainsSubstring("original_max_position_embeddings must be positive"));
  CHECK_THAT(errorWith("\"rms_norm_eps\": ", "\"rms_norm_eps\": -"), ContainsSubstring("norm epsilon"));
  writeText(dir.path + "/config.json", full);
}

TEST_CASE("shard loads equal shardWeights of the full load") {
  for (const char* arch : {"llama", "qwen3", "qwen2"}) {
    for (int tp : {2, 4}) {
      DYNAMIC_SECTION(arch << " tp=" << tp) {
        TempDir dir;
        const ModelWeights written = randomWeights(smallConfig(arch), 5);
        hftest::WriteOptions o;
        o.architecture = hftest::architectureOf(arch);
        o.dtype = "BF16";
        o.shards = 2;
        hftest::writeHfModel(dir.path, written, o);
        const hf::HfModel full = hf::loadHfModel(dir.path, 0);
        for (int rank = 0; rank < tp; ++rank) {
          INFO("rank " << rank);
          const ShardLayout layout = planShard(full.weights.config, tp, rank);
          const hf::HfModel shard = hf::loadHfShard(dir.path, 0, tp, rank);
          requireSameWeights(shard.weights, shardWeights(full.weights, layout));
        }
      }
    }
  }
}

TEST_CASE("a model that does not split gives a clear error") {
  TempDir dir;
  hftest::writeHfModel(dir.path, randomWeights(smallConfig("llama"), 2), {});
  CHECK_THAT(errorOf([&] { hf::loadHfShard(dir.path, 0, 3, 0); }), ContainsSubstring("cannot split the model over 3 ranks"));
}

TEST_CASE("unsupported architectures and configs are named") {
  TempDir dir;
  hftest::WriteOptions o;
  o.architecture = "GPT2LMHeadModel";
  hftest::writeHfModel(dir.path, randomWeights(smallConfig("llama"), 2), o);
  const std::string e = errorOf([&] { hf::loadHfModel(dir.path, 0); });
  CHECK_THAT(e, ContainsSubstring("GPT2LMHeadModel"));
  CHECK_THAT(e, ContainsSubstring("config.json"));

  std::string config = readText(dir.path + "/config.json");
  config.replace(config.find("GPT2LMHeadModel"), 15, "LlamaForCausalLM");
  writeText(dir.path + "/config.json", config);
  REQUIRE_NOTHROW(hf::loadHfModel(dir.path, 0));

  writeText(dir.path + "/config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32}");
  CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("intermediate_size"));
  writeText(dir.path + "/config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_act\": 7}");
  CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("unexpected structure"));
  writeText(dir.path + "/config.json", "{ not json");
  CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("not valid JSON"));
  CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path + "/nowhere", 0); }), ContainsSubstring("cannot open"));
}

namespace {

// Logits of `tokens` at every position from TP ranks, each built from its
// own loadCheckpointShard, must equal TP=1 on the weights as written and the
// naive double-precision pass (test_engine_naive) at the last position.
void checkCheckpointDecodes(const std::string& dir, const ModelWeights& written, int tp) {
  const std::vector<int> tokens = {1, 7, 30, 2, 19, 5, 33, 11};
  CpuTpModel want(written, 1);
  LocalAllReduce reduce(tp);
  std::vector<CpuModel> ranks;
  for (int r = 0; r < tp; ++r) {
    ModelWeights shard = loadCheckpointShard(dir, tp, r);
    const ShardLayout layout = planShard(shard.config, tp, r);
    ranks.emplace_back(std::move(shard), layout, &reduce.rank(r));
  }
  std::vector<float> last;
  for (int pos = 0; pos < int(tokens.size()); ++pos) {
    const std::vector<float> w = want.forward(tokens[pos], pos);
    std::vector<std::vector<float>> got(tp);
    std::vector<std::thread> threads;
    for (int r = 0; r < tp; ++r) threads.emplace_back([&, r] { got[r] = ranks[r].forward(tokens[pos], pos); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < tp; ++r)
      for (size_t i = 0; i < w.size(); ++i) REQUIRE(std::fabs(got[r][i] - w[i]) <= 1e-4f + 1e-4f * std::fabs(w[i]));
    last = got[0];
  }
  const std::vector<double> naive = enginetest::naiveLogits(written, tokens);
  for (size_t i = 0; i < naive.size(); ++i) REQUIRE(std::fabs(last[i] - naive[i]) < 1e-3);
}

}  // namespace

TEST_CASE("qwen2 biases reach the forward pass through loadCheckpointShard") {
  TempDir dir;
  const ModelWeights w = randomWeights(smallConfig("qwen2"), 2);  // with bq/bk/bv
  hftest::WriteOptions o;
  o.architecture = "Qwen2ForCausalLM";
  hftest::writeHfModel(dir.path, w, o);
  const hf::HfModel m = hf::loadHfModel(dir.path, 0);
  CHECK_NOTHROW(hf::requireEngineSupport(m.hf));
  CHECK(m.weights.config.qkvBias);
  const ModelWeights loaded = loadCheckpointShard(dir.path, 1, 0);
  REQUIRE(loaded.layers.size() == w.layers.size());
  requireSame(loaded.layers[1].bq, w.layers[1].bq, "bq");
  requireSame(loaded.layers[1].bv, w.layers[1].bv, "bv");
  for (int tp : {1, 2, 4}) {
    INFO("tp " << tp);
    checkCheckpointDecodes(dir.path, w, tp);
  }
}

TEST_CASE("Llama 3.1 rope_scaling reaches the forward pass; other types are refused") {
  TempDir dir;
  ModelConfig c = smallConfig("llama");
  c.ropeTheta = 10000.0f;  // so every pair's wavelength (6 to 6e3) falls in a different regime below
  ModelWeights w = randomWeights(c, 4);
  hftest::writeHfModel(dir.path, w, {});
  std::string config = readText(dir.path + "/config.json");
  const std::string plain = config;
  config.replace(config.find("\"rope_scaling\": null"), 20,
                 "\"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
                 "\"original_max_position_embeddings\": 64, \"rope_type\": \"llama3\"}");
  writeText(dir.path + "/config.json", config);
  // By hand: wavelengths 2*pi*10000^(i/4) = 6.3, 62.8, 628, 6283 against 64/4 = 16 and 64/1 = 64:
  // pair 0 kept, pair 1 blended with smooth = (64/62.8 - 1)/3, pairs 2 and 3 slowed 8x.
  const double kPi = 3.14159265358979323846;
  const double f1 = 0.1, smooth = (64 / (2 * kPi / f1) - 1) / 3;
  const std::vector<double> want = {1.0, (1 - smooth) * f1 / 8 + smooth * f1, 0.01 / 8, 0.001 / 8};
  const ModelWeights loaded = loadCheckpointShard(dir.path, 1, 0);
  REQUIRE(loaded.config.ropeFreqs.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(std::fabs(loaded.config.ropeFreqs[i] / want[i] - 1) < 1e-6);
  w.config.ropeFreqs = loaded.config.ropeFreqs;
  checkCheckpointDecodes(dir.path, w, 2);

  config = plain;
  config.replace(config.find("\"rope_scaling\": null"), 20, "\"rope_scaling\": {\"factor\": 0, \"rope_type\": \"linear\"}");
  writeText(dir.path + "/config.json", config);
  CHECK_THAT(errorOf([&] { loadCheckpointShard(dir.path, 1, 0); }), ContainsSubstring("config.json: rope_scaling: factor"));

  config = plain;
  config.replace(config.find("\"rope_scaling\": null"), 20, "\"rope_scaling\": {\"factor\": 4.0, \"rope_type\": \"yarn\"}");
  writeText(dir.path + "/config.json", config);
  const std::string e = errorOf([&] { loadCheckpointShard(dir.path, 1, 0); });
  CHECK_THAT(e, ContainsSubstring("rope_scaling"));
  CHECK_THAT(e, ContainsSubstring("yarn"));
}

TEST_CASE("truncated and corrupt safetensors files give errors naming file and tensor") {
  TempDir dir;
  hftest::writeHfModel(dir.path, randomWeights(smallConfig("llama"), 4), {});
  const std::string path = dir.path + "/model.safetensors";
  const std::string good = readText(path);

  SECTION("truncated data") {
    writeText(path, good.substr(0, good.size() - 10));
    const std::string e = errorOf([&] { hf::loadHfModel(dir.path, 0); });
    CHECK_THAT(e, ContainsSubstring("model.safetensors"));
    CHECK_THAT(e, ContainsSubstring("lm_head.weight"));  // the last tensor written
    CHECK_THAT(e, ContainsSubstring("truncated"));
  }
  SECTION("truncated inside the header") {
    writeText(path, good.substr(0, 100));
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("header length"));
  }
  SECTION("shorter than the length field") {
    writeText(path, good.substr(0, 5));
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("too short"));
  }
  SECTION("empty file") {
    writeText(path, "");
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("too short"));
  }
  SECTION("huge header length") {
    std::string bad = good;
    bad[7] = char(0x7f);
    writeText(path, bad);
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("header length"));
  }
  SECTION("garbage header") {
    std::string bad = good;
    bad[8] = '#';
    writeText(path, bad);
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("not valid JSON"));
  }
  SECTION("offsets that do not match the shape") {
    std::string bad = good;
    const size_t at = bad.find("\"shape\":[32]");
    REQUIRE(at != std::string::npos);
    bad.replace(at, 12, "\"shape\":[31]");
    writeText(path, bad);
    const std::string e = errorOf([&] { hf::loadHfModel(dir.path, 0); });
    CHECK_THAT(e, ContainsSubstring("do not hold shape [31]"));
  }
  SECTION("missing file") {
    ::unlink(path.c_str());
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("model.safetensors: cannot open"));
  }
  SECTION("missing shard named by the index") {
    writeText(dir.path + "/model.safetensors.index.json",
              "{\"weight_map\": {\"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}");
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("model-00002-of-00002.safetensors: cannot open"));
  }
  SECTION("shard names that are no plain file name") {
    // "model.safetensors\u0000x" opened model.safetensors, a file the index does not name.
    for (const char* name : {"model.safetensors\\u0000x", "../model.safetensors", "", ".", ".."}) {
      writeText(dir.path + "/model.safetensors.index.json",
                std::string("{\"weight_map\": {\"model.norm.weight\": \"") + name + "\"}}");
      CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("is not a plain file name"));
    }
  }
}

// A handler the process installed to run once (SA_RESETHAND): the first
// SIGBUS runs it, the second ends the process, read guard or not.
volatile sig_atomic_t gOnceHandlerRuns = 0;
void onceHandler(int) { gOnceHandlerRuns = gOnceHandlerRuns + 1; }

// The read guard's handler must not change what a SIGBUS that a process
// sends does: it ends the process by default, does nothing where the
// process ignores SIGBUS, and runs a handler installed to run once just
// once. Each case runs in a child, after a guarded read installed the handler.
TEST_CASE("a SIGBUS sent by a process does what it did without the read guard") {
  {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      struct sigaction once = {};
      once.sa_handler = onceHandler;
      once.sa_flags = SA_RESETHAND;
      sigemptyset(&once.sa_mask);
      sigaction(SIGBUS, &once, nullptr);
      char byte = 0;
      if (!hf::readMapped(&byte, 1, [&] { byte = 1; })) _exit(3);
      kill(getpid(), SIGBUS);
      if (gOnceHandlerRuns != 1) _exit(4);
      kill(getpid(), SIGBUS);
      _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    INFO("once-handler child: exited " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1));
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS));
  }
  for (bool ignored : {false, true}) {
    INFO((ignored ? "SIGBUS ignored" : "SIGBUS default"));
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      if (ignored) signal(SIGBUS, SIG_IGN);
      char byte = 0;
      if (!hf::readMapped(&byte, 1, [&] { byte = 1; })) _exit(3);
      kill(getpid(), SIGBUS);
      _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    if (ignored) {
      CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    } else {
      CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS));
    }
  }
}

// A NaN or an infinity in a tensor would only show as garbage text: each
// dtype's is named, with its element's index in the whole tensor, also where
// a shard reads a slice of it by rows or by columns.
TEST_CASE("tensors holding a NaN or an infinity are refused by name") {
  for (const char* dtype : {"F32", "BF16", "F16"}) {
    for (float bad : {NAN, -INFINITY}) {
      INFO(dtype << " " << bad);
      TempDir dir;
      ModelWeights w = randomWeights(smallConfig("llama"), 4);
      // wq and wo are [32][32]. Layer 0's wq at row 21, column 3 (element
      // 675) lies in rank 1's half of its rows (column-parallel: rows 16-31,
      // read at index 163); layer 1's wo at row 2, column 3 (element 67) in
      // rank 0's half of its columns (row-parallel: columns 0-15, read at
      // index 35). Each rank meets one, the whole model layer 0's first.
      w.layers[0].wq[21 * 32 + 3] = bad;
      w.layers[1].wo[2 * 32 + 3] = bad;
      hftest::WriteOptions options;
      options.dtype = dtype;
      hftest::writeHfModel(dir.path, w, options);
      CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }),
                 ContainsSubstring("model.layers.0.self_attn.q_proj.weight holds") &&
                     ContainsSubstring("at element 675 of its 1024"));
      CHECK_THAT(errorOf([&] { hf::loadHfShard(dir.path, 0, 2, 0); }),
                 ContainsSubstring("model.layers.1.self_attn.o_proj.weight holds") &&
                     ContainsSubstring("at element 67 of its 1024"));
      CHECK_THAT(errorOf([&] { hf::loadHfShard(dir.path, 0, 2, 1); }),
                 ContainsSubstring("model.layers.0.self_attn.q_proj.weight holds") &&
                     ContainsSubstring("at element 675 of its 1024"));
    }
  }
}

// Another process truncating a shard after it was opened and mapped: every
// read then faults (SIGBUS) at the first page past the new end. Each read
// must fail naming file and tensor, and keep failing the same way (the
// handler stays, SIGBUS is not left blocked), while a good file still reads.
TEST_CASE("a shard cut short while it is mapped gives errors naming file and tensor, not SIGBUS") {
  TempDir dir, good;
  const ModelConfig config = smallConfig("llama");
  hftest::writeHfModel(dir.path, randomWeights(config, 4), {});
  hftest::writeHfModel(good.path, randomWeights(config, 5), {});
  hf::Checkpoint checkpoint(dir.path), intact(good.path);
  const std::vector<int64_t> shape = checkpoint.get("lm_head.weight").shape;
  REQUIRE(shape.size() == 2);
  REQUIRE(::truncate((dir.path + "/model.safetensors").c_str(), 0) == 0);
  const std::function<void()> reads[] = {
      [&] { checkpoint.read("lm_head.weight", shape); },
      [&] { checkpoint.readRows("lm_head.weight", shape[0], shape[1], 1, 2); },
      [&] { checkpoint.readCols("lm_head.weight", shape[0], shape[1], 1, 2); },
      [&] { checkpoint.read("model.norm.weight", {shape[1]}); },
  };
  for (int round = 0; round < 2; ++round) {
    for (const auto& read : reads) {
      const std::string e = errorOf(read);
      CHECK_THAT(e, ContainsSubstring("model.safetensors: tensor "));
      CHECK_THAT(e, ContainsSubstring("became shorter while it was being read"));
    }
    CHECK(intact.read("lm_head.weight", shape).size() == size_t(shape[0] * shape[1]));
  }
}

namespace {

// A safetensors file of the given header (JSON) and `dataBytes` zero bytes.
void writeSafetensors(const std::string& path, const std::string& header, size_t dataBytes) {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  writeText(path, file + header + std::string(dataBytes, '\0'));
}

}  // namespace

TEST_CASE("headers that overlap tensors, repeat a name, wrap shapes or name no regular file are refused") {
  TempDir dir;
  const std::string path = dir.path + "/model.safetensors";
  writeSafetensors(path,
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                   12);
  CHECK_THAT(errorOf([&] { hf::SafetensorsFile file(path); }), ContainsSubstring("a and b share data bytes"));
  // One name twice: the JSON parser would keep the last entry without a word.
  writeSafetensors(path,
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                   16);
  CHECK_THAT(errorOf([&] { hf::SafetensorsFile file(path); }), ContainsSubstring("key \"a\" appears twice"));
  // 2^40 x 2^40 elements wrap 64 bits to 0, which the 0 data bytes would have matched.
  writeSafetensors(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,0]}}",
                   0);
  CHECK_THAT(errorOf([&] { hf::SafetensorsFile file(path); }), ContainsSubstring("implausibly large"));
  // Types the engine does not convert still parse (an unused tensor is only
  // noted; a used one is named when read); a type of no known size is named.
  writeSafetensors(path,
                   "{\"c\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                   "\"f\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[16,18]}}",
                   18);
  CHECK(hf::SafetensorsFile(path).tensors().size() == 2);
  writeSafetensors(path, "{\"q\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1);
  CHECK_THAT(errorOf([&] { hf::SafetensorsFile file(path); }), ContainsSubstring("unknown dtype Q4"));
  // A FIFO would block the open for ever; a directory is no file either.
  ::unlink(path.c_str());
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  CHECK_THAT(errorOf([&] { hf::SafetensorsFile file(path); }), ContainsSubstring("not a regular file"));
  CHECK_THAT(errorOf([&] { hf::SafetensorsFile file(dir.path); }), ContainsSubstring("not a regular file"));
  ::unlink(path.c_str());
}

TEST_CASE("config.json: token ids past 2^31, huge head sizes and special files are refused") {
  TempDir dir;
  hftest::writeHfModel(dir.path, randomWeights(smallConfig("llama"), 2), {});
  const std::string configPath = dir.path + "/config.json";
  const std::string good = readText(configPath);
  auto withField = [&](const std::string& field) { return "{" + field + "," + good.substr(good.find('{') + 1); };
  const size_t eos = good.find("\"eos_token_id\": [");  // the writer's [2, 3]
  REQUIRE(eos != std::string::npos);
  const size_t eosEnd = good.find(']', eos) + 1;
  // 2^32 + 42, which read as an int is 42
  writeText(configPath, good.substr(0, eos) + "\"eos_token_id\": 4294967338" + good.substr(eosEnd));
  CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("out of range"));
  // Its RoPE table alone would take 4 GB before any tensor is compared.
  writeText(configPath, withField("\"head_dim\": 1073741824"));
  CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("larger than 4096"));
  writeText(configPath, withField("\"sliding_window\": -4096"));
  CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("\"sliding_window\" is negative"));
  ::unlink(configPath.c_str());
  REQUIRE(::mkfifo(configPath.c_str(), 0600) == 0);
  CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("not a regular file"));
  ::unlink(configPath.c_str());
}

TEST_CASE("a tokenizer.json in the model directory that is no regular file is named, not skipped") {
  TempDir dir;
  ModelConfig c = smallConfig("llama");
  hftest::writeHfModel(dir.path, randomWeights(c, 2), {});
  REQUIRE(::mkdir((dir.path + "/tokenizer.json").c_str(), 0700) == 0);
  CHECK_THAT(errorOf([&] { openTextCodec(dir.path, "", c.vocab, false); }),
             ContainsSubstring("tokenizer.json: not a regular file"));
  ::rmdir((dir.path + "/tokenizer.json").c_str());
}

TEST_CASE("tensors the config does not use are listed") {
  TempDir dir;
  ModelConfig c = smallConfig("llama");
  hftest::writeHfModel(dir.path, randomWeights(c, 3), {});
  CHECK(hf::loadHfModel(dir.path, 0).unusedTensors.empty());
  // config.json of a one-layer model over a checkpoint of more.
  std::string config = readText(dir.path + "/config.json");
  const std::string layers = "\"num_hidden_layers\": " + std::to_string(c.layers);
  REQUIRE(config.find(layers) != std::string::npos);
  config.replace(config.find(layers), layers.size(), "\"num_hidden_layers\": 1");
  writeText(dir.path + "/config.json", config);
  const std::vector<std::string> unused = hf::loadHfModel(dir.path, 0).unusedTensors;
  REQUIRE_FALSE(unused.empty());
  CHECK(unused[0].rfind("model.layers.1.", 0) == 0);
}

TEST_CASE("missing, misshapen and untyped tensors are named") {
  TempDir dir;
  ModelConfig c = smallConfig("llama");
  hftest::writeHfModel(dir.path, randomWeights(c, 4), {});
  std::string config = readText(dir.path + "/config.json");

  SECTION("untied config without lm_head") {
    c.tiedClassifier = true;
    hftest::writeHfModel(dir.path, randomWeights(c, 4), {});
    writeText(dir.path + "/config.json", config);  // says untied
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("lm_head.weight is missing"));
  }
  SECTION("config larger than the tensors") {
    config.replace(config.find("\"intermediate_size\": 48"), 23, "\"intermediate_size\": 64");
    writeText(dir.path + "/config.json", config);
    const std::string e = errorOf([&] { hf::loadHfModel(dir.path, 0); });
    CHECK_THAT(e, ContainsSubstring("model.layers.0.mlp.gate_proj.weight has shape [48, 32]"));
  }
  SECTION("unsupported dtype") {
    std::string st = readText(dir.path + "/model.safetensors");
    const size_t at = st.find("\"F32\"");
    st.replace(at, 5, "\"I32\"");
    writeText(dir.path + "/model.safetensors", st);
    CHECK_THAT(errorOf([&] { hf::loadHfModel(dir.path, 0); }), ContainsSubstring("dtype I32"));
  }
}

// TP=2 and TP=4 from per-rank shard loads (each rank reading only its
// slices; at TP=4 the 2 KV heads are replicated) against TP=1 from the full
// load, every supported architecture: same logits up to float32 summation
// order, and bit-identical on every rank (so every rank samples the same).
TEST_CASE("HF models decode the same with TP=2 and TP=4 shard loads as with TP=1") {
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3"})
    for (int tp : {2, 4}) DYNAMIC_SECTION(arch << " TP=" << tp) {
      TempDir dir;
      hftest::WriteOptions o;
      o.architecture = hftest::architectureOf(arch);
      o.dtype = "BF16";
      hftest::writeHfModel(dir.path, randomWeights(smallConfig(arch), 21), o);
      const hf::HfModel full = hf::loadHfModel(dir.path, 0);
      const ModelConfig& c = full.weights.config;
      NoAllReduce none;
      CpuModel tp1(full.weights, planShard(c, 1, 0), &none);

      LocalAllReduce reduce(tp);
      std::vector<CpuModel> ranks;
      for (int r = 0; r < tp; ++r)
        ranks.emplace_back(hf::loadHfShard(dir.path, 0, tp, r).weights, planShard(c, tp, r), &reduce.rank(r));

      const std::vector<int> tokens = {1, 7, 30, 2, 19, 5};
      for (int pos = 0; pos < int(tokens.size()); ++pos) {
        const std::vector<float> want = tp1.forward(tokens[pos], pos);
        std::vector<std::vector<float>> got(tp);
        std::vector<std::thread> threads;
        for (int r = 0; r < tp; ++r) threads.emplace_back([&, r] { got[r] = ranks[r].forward(tokens[pos], pos); });
        for (auto& t : threads) t.join();
        for (int r = 0; r < tp; ++r) {
          REQUIRE(got[r].size() == want.size());
          for (size_t i = 0; i < want.size(); ++i) REQUIRE(std::fabs(got[r][i] - want[i]) <= 1e-4f + 1e-4f * std::fabs(want[i]));
        }
        for (int r = 1; r < tp; ++r)
          for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[r][i] == got[0][i]);  // every rank the same
      }
    }
}
