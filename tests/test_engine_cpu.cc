// SPDX-License-Identifier: BSD-3-Clause
// The engine's float32 CPU path on a real trained model (stories260K) and on
// small random models: tokenizer, loader, forward pass against an independent
// naive computation, greedy decoding, sampling, and TP = N against TP = 1.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>

#include <atomic>
#include <chrono>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "allreduce_hook.h"
#include "argmax_key.h"
#include "attention_plan.h"
#include "cpu_model.h"
#include "llama2c_loader.h"
#include "options.h"
#include "sampler.h"
#include "shapes.h"
#include "text_codec.h"
#include "support/shared_model.h"
#include "test_engine_naive.h"
#include "tokenizer.h"

using namespace engine;
using enginetest::naiveLogits;
using rcn::test::requireSharedModel;

namespace {

const ModelWeights& stories() {
  static ModelWeights weights = loadLlama2c(requireSharedModel("stories260K.bin"));
  return weights;
}

const Llama2cTokenizer& tok512() {
  static Llama2cTokenizer tokenizer(requireSharedModel("tok512.bin"), 512);
  return tokenizer;
}

// Greedy decoding: the prompt, then `steps` argmax tokens.
std::vector<int> greedy(CpuTpModel& model, std::vector<int> tokens, int steps) {
  const size_t promptLen = tokens.size();
  for (int pos = 0; pos + 1 < int(promptLen) + steps; ++pos) {
    const std::vector<float>& logits = model.forward(tokens[pos], pos);
    if (pos + 1 >= int(promptLen)) tokens.push_back(argmax(logits.data(), model.config().vocab));
  }
  return tokens;
}

double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  return worst;
}

// Runs `tokens` through TP = 1 and TP = tp side by side and returns the worst
// logit difference over all positions.
double tpDifference(const ModelWeights& m, int tp, const std::vector<int>& tokens) {
  CpuTpModel one(m, 1), many(m, tp);
  double worst = 0;
  for (int pos = 0; pos < int(tokens.size()); ++pos) {
    std::vector<float> a = one.forward(tokens[pos], pos);
    worst = std::max(worst, maxAbsDiff(a, many.forward(tokens[pos], pos)));
  }
  return worst;
}

}  // namespace

TEST_CASE("stories260K header and shape", "[engine]") {
  const ModelConfig& c = stories().config;
  CHECK(c.dim == 64);
  CHECK(c.hidden == 172);
  CHECK(c.layers == 5);
  CHECK(c.heads == 8);
  CHECK(c.kvHeads == 4);
  CHECK(c.vocab == 512);
  CHECK(c.seqLen == 512);
  CHECK(c.tiedClassifier);
}

TEST_CASE("llama2.c tokenizer round trip", "[engine]") {
  const Llama2cTokenizer& tok = tok512();
  for (std::string text : {"Once upon a time", "Lily and Ben went to the park.\nThey played!",
                           "naïve café 日本 \t tabs", "x", ""}) {
    std::vector<int> ids = tok.encode(text, true);
    REQUIRE(!ids.empty());
    CHECK(ids[0] == Llama2cTokenizer::kBos);
    CHECK(tok.decodeAll(ids) == text);
  }
  // Merging makes the common words single tokens: far fewer tokens than bytes.
  CHECK(tok.encode("Once upon a time there was a little girl", false).size() < 20);
}

TEST_CASE("first logits match an independent double-precision computation", "[engine]") {
  const ModelWeights& m = stories();
  std::vector<int> tokens = tok512().encode("Once upon a time", true);
  REQUIRE(tokens.size() >= 4);
  CpuTpModel model(m, 1);
  for (int pos = 0; pos < 4; ++pos) {
    std::vector<float> logits = model.forward(tokens[pos], pos);
    std::vector<int> prefix(tokens.begin(), tokens.begin() + pos + 1);
    std::vector<double> expected = naiveLogits(m, prefix);
    double worst = 0;
    for (int i = 0; i < m.config.vocab; ++i) worst = std::max(worst, std::fabs(logits[i] - expected[i]));
    INFO("position " << pos << " max |diff| " << worst);
    CHECK(worst < 1e-3);
  }
}

TEST_CASE("greedy decoding of stories260K is stable and coherent", "[engine]") {
  const Llama2cTokenizer& tok = tok512();
  std::vector<int> prompt = tok.encode("Once upon a time", true);
  CpuTpModel model(stories(), 1);
  std::vector<int> first = greedy(model, prompt, 60);
  CpuTpModel again(stories(), 1);
  CHECK(greedy(again, prompt, 60) == first);
  std::string story = tok.decodeAll(first);
  std::printf("greedy story: %s\n", story.c_str());
  CHECK(story.rfind("Once upon a time", 0) == 0);
  // A coherent TinyStories continuation: mostly letters and spaces, real words.
  int letters = 0;
  for (char ch : story) letters += std::isalpha(static_cast<unsigned char>(ch)) || ch == ' ';
  CHECK(letters > int(story.size()) * 9 / 10);
  CHECK(story.find(" the ") != std::string::npos);
  // What llama2.c's own run.c prints for this model at temperature 0.
  CHECK(story.rfind("Once upon a time, there was a little girl named Lily. She loved to play outside "
                    "in the park. One day, she saw a big, red ball.", 0) == 0);
}

TEST_CASE("tensor parallel matches TP=1 on the CPU", "[engine]") {
  std::vector<int> tokens = tok512().encode("Once upon a time there was a big dog", true);
  SECTION("stories260K, TP=2 and TP=4 (interleaved RoPE, grouped-query attention)") {
    CHECK(tpDifference(stories(), 2, tokens) < 1e-4);
    CHECK(tpDifference(stories(), 4, tokens) < 1e-4);
  }
  SECTION("random llama, TP=2 (3 query heads per KV head, untied LM head)") {
    ModelWeights m = randomWeights(shapeConfig("tiny-llama"), 7);
    CHECK(tpDifference(m, 2, {1, 5, 9, 200, 17, 3}) < 1e-4);
  }
  SECTION("random qwen3, TP=2 and TP=4 (q/k norm, rotate-half RoPE, KV heads replicated at 4)") {
    ModelWeights m = randomWeights(shapeConfig("tiny-qwen3"), 11);
    CHECK(tpDifference(m, 2, {1, 5, 9, 200, 17, 3}) < 1e-4);
    CHECK(tpDifference(m, 4, {1, 5, 9, 200, 17, 3}) < 1e-4);
  }
  SECTION("random qwen2, TP=2 and TP=4 (q/k/v biases split with their rows)") {
    ModelWeights m = randomWeights(shapeConfig("tiny-qwen2"), 13);
    CHECK(tpDifference(m, 2, {1, 5, 9, 200, 17, 3}) < 1e-4);
    CHECK(tpDifference(m, 4, {1, 5, 9, 200, 17, 3}) < 1e-4);
  }
}

TEST_CASE("the ranks-as-threads all-reduce sums in rank order and never waits unbounded", "[engine]") {
  SECTION("sum and combine give every rank the same result") {
    LocalAllReduce group(3);
    std::vector<std::vector<float>> data = {{1e8f, 1.0f}, {-1e8f, 2.0f}, {1.0f, 3.0f}};
    std::vector<uint64_t> best(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        group.rank(r).sum(data[r].data(), 2);
        const uint64_t mine = 10 + (r == 1 ? 100 : r);
        group.combine(r, &mine, sizeof mine, [&](const std::vector<const void*>& all) {
          for (const void* p : all) best[r] = std::max(best[r], *static_cast<const uint64_t*>(p));
        });
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
      CHECK(data[r][0] == 1.0f);  // (1e8 - 1e8) + 1: rank order, not 1e8 + (-1e8 + 1) = 0
      CHECK(data[r][1] == 6.0f);
      CHECK(best[r] == 110);
    }
  }
  SECTION("a rank that abandons makes the waiting ones throw at once") {
    LocalAllReduce group(3, std::chrono::seconds(20));
    std::atomic<int> thrown{0}, started{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        float v = 1;
        ++started;
        try {
          group.rank(r).sum(&v, 1);
        } catch (const EngineError& e) {
          thrown += std::string(e.what()).find("left the all-reduce") != std::string::npos;
        }
      });
    while (started < 2) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both are waiting by now
    const auto start = std::chrono::steady_clock::now();
    group.abandon();
    for (auto& t : threads) t.join();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));  // woken, not timed out
    CHECK(thrown == 2);
    float v = 1;
    CHECK_THROWS_AS(group.rank(2).sum(&v, 1), EngineError);  // late, and the group is gone
  }
  SECTION("a rank whose reduction throws makes the others throw at once") {
    LocalAllReduce group(2, std::chrono::seconds(20));
    std::atomic<int> leftMessages{0};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        const int mine = r;
        try {
          group.combine(r, &mine, sizeof mine, [&](const std::vector<const void*>&) {
            if (r == 1) throw EngineError("reduction failed");
          });
        } catch (const EngineError& e) {
          leftMessages += std::string(e.what()).find(r == 1 ? "reduction failed" : "left the all-reduce") !=
                          std::string::npos;
        }
      });
    for (auto& t : threads) t.join();
    CHECK(leftMessages == 2);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
  SECTION("a rank that stays away makes the others throw after the patience") {
    LocalAllReduce group(2, std::chrono::milliseconds(200));
    float v = 1;
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(group.rank(0).sum(&v, 1), Catch::Matchers::ContainsSubstring("within 200 ms"));
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(200));
    CHECK_THROWS_AS(group.rank(1).sum(&v, 1), EngineError);
  }
}

TEST_CASE("random models match the naive computation too", "[engine]") {
  for (const char* shape : {"tiny-llama", "tiny-qwen3", "tiny-qwen2"}) {
    ModelWeights m = randomWeights(shapeConfig(shape), 3);
    std::vector<int> tokens = {1, 42, 7, 99};
    CpuTpModel model(m, 1);
    std::vector<float> logits;
    for (int pos = 0; pos < 4; ++pos) logits = model.forward(tokens[pos], pos);
    std::vector<double> expected = naiveLogits(m, tokens);
    double worst = 0;
    for (int i = 0; i < m.config.vocab; ++i) worst = std::max(worst, std::fabs(logits[i] - expected[i]));
    INFO(shape << " max |diff| " << worst);
    CHECK(worst < 1e-3);
  }
}

TEST_CASE("q/k/v biases change the logits", "[engine]") {
  ModelWeights m = randomWeights(shapeConfig("tiny-qwen2"), 5);
  std::vector<float> with = CpuTpModel(m, 1).forward(42, 0);
  for (LayerWeights& w : m.layers) w.bq.clear(), w.bk.clear(), w.bv.clear();
  m.config.qkvBias = false;
  CHECK(maxAbsDiff(with, CpuTpModel(m, 1).forward(42, 0)) > 1e-3);
  m.config.qkvBias = true;  // declared but missing: refused, not read out of bounds
  CHECK_THROWS_WITH(CpuTpModel(m, 1), Catch::Matchers::ContainsSubstring("bias is missing"));
}

TEST_CASE("RoPE takes a frequency table", "[engine]") {
  // Hand computation: head (1, 2, 3, 4), pairs turn by pos * {0.5, 0.25} at pos 3,
  // i.e. by 1.5 and 0.75 radians.
  const float freqs[2] = {0.5f, 0.25f};
  const double c0 = std::cos(1.5), s0 = std::sin(1.5), c1 = std::cos(0.75), s1 = std::sin(0.75);
  float halves[4] = {1, 2, 3, 4};  // rotate-half: pairs (x0, x2) and (x1, x3)
  rope(halves, 4, 3, freqs, false);
  const double wantHalves[4] = {1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 1 * s0 + 3 * c0, 2 * s1 + 4 * c1};
  float pairs[4] = {1, 2, 3, 4};  // interleaved: pairs (x0, x1) and (x2, x3)
  rope(pairs, 4, 3, freqs, true);
  const double wantPairs[4] = {1 * c0 - 2 * s0, 1 * s0 + 2 * c0, 3 * c1 - 4 * s1, 3 * s1 + 4 * c1};
  for (int i = 0; i < 4; ++i) {
    CHECK(std::fabs(halves[i] - wantHalves[i]) < 1e-6);
    CHECK(std::fabs(pairs[i] - wantPairs[i]) < 1e-6);
  }

  // Empty table: theta^(-2i/d), as before.
  ModelConfig c = shapeConfig("tiny-qwen2");
  const std::vector<float> plain = ropeInverseFrequencies(c);
  REQUIRE(plain.size() == size_t(c.headDim / 2));
  CHECK(plain[0] == 1.0f);
  CHECK(std::fabs(plain[3] / std::pow(1e6, -6.0 / 16) - 1) < 1e-6);

  // A scaled table runs through the whole model (TP=1, TP=2, naive) and changes it.
  c.ropeFreqs = plain;
  for (size_t i = 1; i < plain.size(); ++i) c.ropeFreqs[i] /= 2 + i;  // any table will do
  const ModelWeights scaled = randomWeights(c, 17);
  const std::vector<int> tokens = {1, 42, 7, 99, 3, 250, 8};
  CHECK(tpDifference(scaled, 2, tokens) < 1e-4);
  CpuTpModel model(scaled, 1);
  std::vector<float> logits;
  for (int pos = 0; pos < int(tokens.size()); ++pos) logits = model.forward(tokens[pos], pos);
  const std::vector<double> expected = naiveLogits(scaled, tokens);
  double worst = 0;
  for (int i = 0; i < c.vocab; ++i) worst = std::max(worst, std::fabs(logits[i] - expected[i]));
  CHECK(worst < 1e-3);
  ModelWeights unscaled = scaled;
  unscaled.config.ropeFreqs.clear();
  CpuTpModel plainModel(unscaled, 1);
  std::vector<float> plainLogits;
  for (int pos = 0; pos < int(tokens.size()); ++pos) plainLogits = plainModel.forward(tokens[pos], pos);
  CHECK(maxAbsDiff(logits, plainLogits) > 1e-4);

  c.ropeFreqs.resize(3);
  CHECK_THROWS_WITH(validateConfig(c), Catch::Matchers::ContainsSubstring("frequency table"));
}

TEST_CASE("seeded sampling", "[engine]") {
  std::vector<float> logits = {0.1f, 2.0f, 1.5f, -1.0f, 1.9f};
  SamplerOptions o;
  o.temperature = 1.0f;
  o.seed = 1234;
  Sampler a(o), b(o);
  std::vector<int> drawsA, drawsB;
  for (int i = 0; i < 50; ++i) {
    drawsA.push_back(a.sample(logits.data(), 5));
    drawsB.push_back(b.sample(logits.data(), 5));
  }
  CHECK(drawsA == drawsB);
  o.topK = 1;
  Sampler topOne(o);
  for (int i = 0; i < 10; ++i) CHECK(topOne.sample(logits.data(), 5) == 1);
  o.topK = 0;
  o.topP = 0.5f;  // token 1 alone holds about 37%, tokens 1 and 4 reach 0.5
  Sampler nucleus(o);
  for (int i = 0; i < 50; ++i) {
    int t = nucleus.sample(logits.data(), 5);
    CHECK((t == 1 || t == 4));
  }
  o.temperature = 0.0f;
  Sampler greedySampler(o);
  CHECK(greedySampler.sample(logits.data(), 5) == 1);
  // Overflowed logits are an error, greedy or not, never a token.
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> broken = logits;
    broken[3] = bad;
    for (float temperature : {0.0f, 1.0f}) {
      o.temperature = temperature;
      Sampler sampler(o);
      CHECK_THROWS_WITH(sampler.sample(broken.data(), 5), Catch::Matchers::ContainsSubstring("logit 3 is"));
    }
  }
}

// A llama2.c tokenizer file of the given pieces (score 0 each).
std::string writeTokenizer(const std::vector<std::string>& pieces) {
  std::string path = "/tmp/engine_tokenizer_" + std::to_string(getpid()) + ".bin";
  std::ofstream out(path, std::ios::binary);
  const int32_t maxLength = 8;
  out.write(reinterpret_cast<const char*>(&maxLength), sizeof maxLength);
  for (const std::string& p : pieces) {
    const float score = 0;
    const int32_t length = int32_t(p.size());
    out.write(reinterpret_cast<const char*>(&score), sizeof score);
    out.write(reinterpret_cast<const char*>(&length), sizeof length);
    out.write(p.data(), p.size());
  }
  return path;
}

TEST_CASE("llama2.c tokenizer errors are clear", "[engine]") {
  // A vocabulary too small for the byte tokens: a character it lacks is an error, not a read past its end.
  const std::string path = writeTokenizer({"<unk>", "<s>", "</s>", "a", " "});
  const Llama2cTokenizer tiny(path, 5);
  CHECK(tiny.encode("a a", false) == std::vector<int>{4, 3, 4, 3});
  CHECK_THROWS_WITH(tiny.encode("ab", false), Catch::Matchers::ContainsSubstring("byte 0x62 has no token"));
  std::remove(path.c_str());
  // The rest reads tok512 (and skips without it). Its path is taken first:
  // a SKIP inside CHECK_THROWS_WITH would count as the expected exception.
  const std::string tok512Path = requireSharedModel("tok512.bin");
  // A tokenizer with more tokens than the model: another model's.
  CHECK_THROWS_WITH(Llama2cTokenizer(tok512Path, 100),
                    Catch::Matchers::ContainsSubstring("more than the model's 100 tokens"));
  // And fewer: the file ends at a token's boundary.
  CHECK_THROWS_WITH(Llama2cTokenizer(tok512Path, 600),
                    Catch::Matchers::ContainsSubstring("has 512 tokens, fewer than the model's 600"));
  // Long prompts tokenize in O(n log n): 100 KB of text.
  std::string text;
  while (text.size() < 100000) text += "Once upon a time there was a dog. ";
  CHECK(tok512().decodeAll(tok512().encode(text, true)) == text);
}

TEST_CASE("loader and shape errors are clear", "[engine]") {
  CHECK_THROWS_WITH(loadLlama2c("/nonexistent/model.bin"), Catch::Matchers::ContainsSubstring("cannot open"));

  // A truncated copy of the real checkpoint.
  std::ifstream in(requireSharedModel("stories260K.bin"), std::ios::binary);
  std::vector<char> bytes(100000);
  in.read(bytes.data(), bytes.size());
  std::string path = "/tmp/engine_truncated_" + std::to_string(getpid()) + ".bin";
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
  CHECK_THROWS_WITH(loadLlama2c(path), Catch::Matchers::ContainsSubstring("needs"));
  std::remove(path.c_str());

  CHECK_THROWS_WITH(planShard(stories().config, 3, 0), Catch::Matchers::ContainsSubstring("cannot split"));
  CHECK_THROWS_WITH(shapeConfig("gpt-17"), Catch::Matchers::ContainsSubstring("unknown shape"));
  CpuTpModel model(stories(), 1);
  CHECK_THROWS_WITH(model.forward(512, 0), Catch::Matchers::ContainsSubstring("out of vocabulary"));
  CHECK_THROWS_WITH(model.forward(1, 512), Catch::Matchers::ContainsSubstring("beyond seq_len"));
}

namespace {

// A copy of stories260K.bin (or tok512.bin) with `edit` applied, in a file of
// this process's own; removed when it goes out of scope.
struct EditedCopy {
  std::string path;
  EditedCopy(const char* model, const char* name, const std::function<void(std::string&)>& edit)
      : path("/tmp/engine_" + std::string(name) + "_" + std::to_string(getpid()) + ".bin") {
    std::ifstream in(requireSharedModel(model), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    edit(bytes);
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  }
  ~EditedCopy() { std::remove(path.c_str()); }
};

void putInt(std::string& bytes, size_t at, int32_t v) { std::memcpy(&bytes[at], &v, 4); }
void putFloat(std::string& bytes, size_t at, float v) { std::memcpy(&bytes[at], &v, 4); }

}  // namespace

// What fuzzing the llama2.c formats found loading silently or hanging: a
// header that accounts for fewer bytes than the file has, a NaN or infinity
// among the weights, a FIFO, a token length past the file's end.
TEST_CASE("llama2.c files that would decode garbage or hang are refused by name", "[engine]") {
  const auto says = [](const char* text) { return Catch::Matchers::ContainsSubstring(text); };
  {
    EditedCopy oneLayer("stories260K.bin", "layers", [](std::string& b) { putInt(b, 8, 1); });
    CHECK_THROWS_WITH(loadLlama2c(oneLayer.path), says("needs exactly"));
    EditedCopy trailing("stories260K.bin", "trailing", [](std::string& b) { b += std::string(1000, '\0'); });
    CHECK_THROWS_WITH(loadLlama2c(trailing.path), says("needs exactly"));
    // The sign of the vocabulary size says whether a classifier follows.
    EditedCopy ownClassifier("stories260K.bin", "classifier", [](std::string& b) { putInt(b, 20, -512); });
    CHECK_THROWS_WITH(loadLlama2c(ownClassifier.path), says("own classifier) needs exactly"));
    EditedCopy intMin("stories260K.bin", "intmin", [](std::string& b) { putInt(b, 20, INT32_MIN); });
    CHECK_THROWS_WITH(loadLlama2c(intMin.path), says("out of range"));
  }
  for (float bad : {NAN, INFINITY}) {
    EditedCopy nonFinite("stories260K.bin", "nan", [&](std::string& b) { putFloat(b, 28 + 4 * (512 * 64 + 3), bad); });
    CHECK_THROWS_WITH(loadLlama2c(nonFinite.path), says("rms_att holds"));
  }
  {
    // The 11th token's length, the file's largest possible, past the file's end.
    EditedCopy huge("tok512.bin", "tokhuge", [](std::string& b) {
      putInt(b, 0, INT32_MAX);
      size_t at = 4;
      for (int i = 0; i < 10; ++i) {
        int32_t length;
        std::memcpy(&length, &b[at + 4], 4);
        at += 8 + size_t(length);
      }
      putInt(b, at + 4, INT32_MAX);
    });
    CHECK_THROWS_WITH(Llama2cTokenizer(huge.path, 512), says("truncated at token 10"));
    EditedCopy nanScore("tok512.bin", "toknan", [](std::string& b) { putFloat(b, 4, NAN); });
    CHECK_THROWS_WITH(Llama2cTokenizer(nanScore.path, 512), says("token 0 has a NaN score"));
    EditedCopy tiny("tok512.bin", "tok3", [](std::string& b) { b.resize(3); });
    CHECK_THROWS_WITH(Llama2cTokenizer(tiny.path, 512), says("4-byte header"));
  }
  const std::string fifo = "/tmp/engine_fifo_" + std::to_string(getpid());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(loadLlama2c(fifo), says("not a regular file"));
  CHECK_THROWS_WITH(Llama2cTokenizer(fifo, 512), says("not a regular file"));
  std::remove(fifo.c_str());
}

namespace {

// parseOptions on `rcn_engine args...`.
EngineOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "rcn_engine");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return parseOptions(int(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("the shard-of option is refused where it cannot time a lone shard", "[engine]") {
  const std::vector<std::string> model = {"--random-weights", "--shape", "llama3-8b"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), model.begin(), model.end());
    return extra;
  };
  CHECK(parse(with({"--bench", "--shard-of", "2"})).shardOf == 2);
  CHECK(parse(with({"--bench"})).shardOf == 1);
  const auto refused = Catch::Matchers::ContainsSubstring("--shard-of times one GPU's shard");
  CHECK_THROWS_WITH(parse(with({"--shard-of", "2"})), refused);  // not a bench
  CHECK_THROWS_WITH(parse(with({"--bench", "--shard-of", "2", "--tp", "2"})), refused);
  CHECK_THROWS_WITH(parse(with({"--bench", "--shard-of", "2", "--device", "cpu"})), refused);
  CHECK_THROWS_WITH(parse(with({"--bench", "--shard-of", "2", "--fused-allreduce"})),
                    Catch::Matchers::ContainsSubstring("skips the all-reduces"));
  CHECK(parse(with({"--bench", "--shard-of", "2", "--fused-norm"})).fuseNorm);  // the norms still run
  CHECK_THROWS_WITH(parse(with({"--bench", "--fused-norm", "--fused-allreduce"})),
                    Catch::Matchers::ContainsSubstring("choose one"));
  CHECK_THROWS_WITH(parse(with({"--bench", "--shard-of", "0"})), Catch::Matchers::ContainsSubstring("at least 1"));
  CHECK_THROWS_WITH(parse(with({"--bench", "--shard-of", "two"})),
                    Catch::Matchers::ContainsSubstring("not an integer"));
}

// Options that would be ignored without a word (fuzzing and review found
// them): a model given twice, the bench's options without --bench and text
// generation's with it, --shape without --random-weights, GPU-only options on
// the CPU path, an empty item in a list.
TEST_CASE("options the run would ignore, or that conflict, are refused by name", "[engine]") {
  const auto says = [](const char* text) { return Catch::Matchers::ContainsSubstring(text); };
  CHECK_THROWS_WITH(parse({"--random-weights", "--shape", "tiny-llama", "--model", "m.bin"}), says("not both"));
  CHECK(parse({"--model", "m.bin", "--bench", "--json", "x.json"}).jsonPath == "x.json");
  for (std::vector<std::string> benchOnly : std::vector<std::vector<std::string>>{
           {"--json", "x.json"}, {"--batch", "2"}, {"--prompt-len", "5"}, {"--decode-steps", "9"}, {"--profile"}}) {
    const std::string name = benchOnly[0];
    benchOnly.insert(benchOnly.begin(), {"--model", "m.bin"});
    CHECK_THROWS_WITH(parse(benchOnly), says((name + " sets up the --bench run: it needs --bench").c_str()));
  }
  for (std::vector<std::string> textOnly : std::vector<std::vector<std::string>>{
           {"--prompt", "x"}, {"--steps", "3"}, {"--temperature", "1"}, {"--top-k", "2"}, {"--top-p", "0.5"}}) {
    const std::string name = textOnly[0];
    textOnly.insert(textOnly.begin(), {"--model", "m.bin", "--bench"});
    CHECK_THROWS_WITH(parse(textOnly), says((name + " sets up text generation").c_str()));
  }
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--shape", "llama3-8b"}), says("--shape names the model"));
  CHECK(parse({"--random-weights", "--shape", "tiny-llama", "--bench", "--seed", "7"}).sampler.seed == 7);  // weights, prompt
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--bench", "--batch", "1,"}), says("--batch: '' is not an integer"));
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--bench", "--batch", "1,,8"}), says("--batch: '' is not an integer"));
  CHECK(parse({"--model", "m.bin", "--bench", "--batch", "1,8"}).batches == std::vector<int>{1, 8});
  CHECK_NOTHROW(requireCpuOptions(parse({"--model", "m.bin", "--device", "cpu", "--tp", "2"})));
  const std::vector<std::vector<std::string>> gpuOnly = {
      {"--bench"},   {"--collective", "nccl"}, {"--dtype", "bf16"}, {"--no-graph"},
      {"--no-gemv"}, {"--fused-allreduce"},    {"--fused-norm"},    {"--profile"}};
  for (std::vector<std::string> option : gpuOnly) {
    const std::string name = option[0];
    option.insert(option.begin(), {"--model", "m.bin", "--device", "cpu"});
    CHECK_THROWS_WITH(requireCpuOptions(parse(option)), says((name + " ").c_str()));
  }
}

// Sampling choices at temperature 0 (greedy: they would change nothing),
// empty paths, and each out-of-range count or sampling value, named by its flag.
TEST_CASE("sampling options of a greedy run, empty paths and bad values are refused by their flag", "[engine]") {
  const auto says = [](const char* text) { return Catch::Matchers::ContainsSubstring(text); };
  for (const char* flag : {"--top-k", "--top-p", "--seed"}) {
    const std::string value = std::string(flag) == "--top-p" ? "0.5" : "3";
    CHECK_THROWS_WITH(parse({"--model", "m.bin", flag, value}), says((std::string(flag) + " ").c_str()));
    CHECK_THROWS_WITH(parse({"--model", "m.bin", flag, value}), says("decodes greedily"));
    CHECK_NOTHROW(parse({"--model", "m.bin", "--temperature", "0.7", flag, value}));
  }
  CHECK(parse({"--random-weights", "--shape", "tiny-llama", "--seed", "9"}).sampler.seed == 9);  // picks the weights
  for (const char* flag : {"--model", "--tokenizer", "--json"})
    CHECK_THROWS_WITH(parse({"--model", "m.bin", "--bench", flag, ""}), says((std::string(flag) + " needs a path").c_str()));
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--steps", "-1"}), says("--steps must be 0 or more"));
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--bench", "--prompt-len", "0"}), says("--prompt-len must be at least 1"));
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--bench", "--decode-steps", "0"}),
                    says("--decode-steps must be at least 1"));
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--temperature", "-1"}), says("--temperature must be 0"));
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--temperature", "1", "--top-p", "0"}), says("--top-p must be in"));
  CHECK_THROWS_WITH(parse({"--model", "m.bin", "--temperature", "1", "--top-k", "-1"}), says("--top-k must be 0"));
  CHECK(parse({"--model", "m.bin", "--prompt", "hi"}).promptGiven);
  CHECK_FALSE(parse({"--model", "m.bin"}).promptGiven);
}

// A prompt the user gave cannot be encoded without a tokenizer: refused, not
// replaced by the BOS token alone.
TEST_CASE("a prompt without a tokenizer is refused", "[engine]") {
  const std::string model = requireSharedModel("stories260K.bin");
  CHECK_THROWS_WITH(openTextCodec(model, "", 512, true), Catch::Matchers::ContainsSubstring("--prompt needs a tokenizer"));
  CHECK(openTextCodec(model, "", 512, false)->encode("ignored") == std::vector<int>{1});  // BOS alone
}

// The vocab-parallel argmax (argmax_key.h, used by the GPU path): the largest
// key over the ranks' slices must name the global argmax, lowest index on ties.
TEST_CASE("argmax keys order by value, then by the lower index", "[engine]") {
  const float values[] = {-INFINITY, -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 1.0f, 2.5f, 1e30f, INFINITY};
  for (float a : values)
    for (float b : values)
      for (uint32_t ia : {0u, 7u, 128255u})
        for (uint32_t ib : {0u, 7u, 128255u}) {
          const bool aFirst = a > b || (a == b && ia < ib);
          INFO(a << "@" << ia << " vs " << b << "@" << ib);
          CHECK((argmaxKey(a, ia) > argmaxKey(b, ib)) == aFirst);
        }
  for (uint32_t index : {0u, 1u, 151935u}) CHECK(argmaxKeyIndex(argmaxKey(-2.0f, index)) == int(index));
  // A winner that is not finite is seen (the GPU argmax's overflow flag).
  for (float v : values) CHECK(argmaxKeyFinite(argmaxKey(v, 3)) == std::isfinite(v));
  for (float v : {FLT_MAX, -FLT_MAX, FLT_MIN, std::nanf(""), -std::nanf("")})
    CHECK(argmaxKeyFinite(argmaxKey(v, 3)) == std::isfinite(v));

  // Random logits with many ties, split over 1-5 ranks as GpuModel splits them.
  std::mt19937 gen(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int vocab = 1 + int(gen() % 2000);
    std::vector<float> logits(vocab);
    for (float& v : logits) v = float(int(gen() % 9) - 4) * 0.5f;  // few distinct values
    const int want = int(std::max_element(logits.begin(), logits.end()) - logits.begin());  // first maximum
    for (int ranks = 1; ranks <= 5; ++ranks) {
      uint64_t best = 0;
      for (int r = 0; r < ranks; ++r) {
        const int start = int(int64_t(vocab) * r / ranks), end = int(int64_t(vocab) * (r + 1) / ranks);
        if (start == end) continue;
        const int local = int(std::max_element(logits.begin() + start, logits.begin() + end) - logits.begin());
        best = std::max(best, argmaxKey(logits[local], uint32_t(local)));
      }
      CHECK(argmaxKeyIndex(best) == want);
    }
  }
}

// The split count attentionSplits picks (attention_plan.h) on 132 SMs (an
// H200): unsplit for heads of 64 at 236 positions (the merge would cost
// more than it saves) and for batch 8; for heads of 128 at 236 positions
// (the benchmark's llama3-8b) 2 splits of 32 heads (4 would take more than
// half the SMs) and 4 of 16; more at longer contexts; never more than two
// blocks per SM, nor more than kAttentionMaxSplits. Two blocks per SM only
// when the blocks outnumber the SMs and two fit in an SM's shared memory.
TEST_CASE("attention split counts", "[engine]") {
  const int sms = 132;
  CHECK(attentionSplits(236, 32, 64, sms) == 1);
  CHECK(attentionSplits(236, 16, 64, sms) == 1);
  CHECK(attentionSplits(236, 32, 128, sms) == 2);
  CHECK(attentionSplits(236, 16, 128, sms) == 4);
  CHECK(attentionSplits(236, 128, 128, sms) == 1);
  CHECK(attentionSplits(236, 256, 128, sms) == 1);
  CHECK(attentionSplits(128, 1, 8, sms) == 1);
  CHECK(attentionSplits(1132, 32, 128, sms) == 6);
  CHECK(attentionSplits(4096, 32, 128, sms) == 8);
  CHECK(attentionSplits(4096, 1, 128, sms) == kAttentionMaxSplits);
  for (int gpuSms : {16, 132})
    for (int blocks : {1, 3, 16, 32, 100, 127, 300})
      for (int context : {1, 64, 1000, 100000}) {
        const int splits = attentionSplits(context, blocks, 128, gpuSms);
        CHECK(splits >= 1);
        CHECK(splits <= kAttentionMaxSplits);
        CHECK((splits == 1 || blocks * splits <= 2 * gpuSms));
      }
  const size_t h200Shared = 233472, decodeShared = attentionPassBytes(236, 128, 4);
  CHECK(attentionBlocksPerSm(132, sms, decodeShared, h200Shared) == 1);
  CHECK(attentionBlocksPerSm(133, sms, decodeShared, h200Shared) == 2);
  CHECK(attentionBlocksPerSm(256, sms, decodeShared, h200Shared) == 2);
  // A long unsplit (prefill) pass whose blocks' shared memory leaves room for one an SM.
  CHECK(attentionBlocksPerSm(4096, sms, attentionSharedBytes(32768, 128, 1), h200Shared) == 1);
}

// How many cache rows a block asks L2 for ahead (attentionPrefetchRows), on
// a 50 MB L2 with llama3-8b's bf16 rows of 256 bytes: all of a pass whose
// distinct rows fit in half the L2, a share past that, never fewer than the
// minimum (measured: a batch of 8 at 4K positions, 64 runs, is 9 % faster a
// step asking for 800 rows a block than for all of them).
TEST_CASE("attention L2 prefetch rows", "[engine]") {
  const size_t l2 = 50u << 20;
  CHECK(attentionPrefetchRows(16, 256, l2) == 3200);  // batch 1, 8 KV heads, 2 splits: all of a split's rows
  // 64 runs: batch 1 at 4K positions in 8 splits (attentionSplits above),
  // all of a split's 509 rows; batch 8 unsplit, 800 of its 4068 (all 228 of
  // a 128-token prompt's); the half of TP=2 at batch 8 (4 KV heads), 1600.
  CHECK(attentionPrefetchRows(64, 256, l2) == 800);
  CHECK(attentionPrefetchRows(32, 256, l2) == 1600);
  CHECK(attentionPrefetchRows(8 * 8, 512, l2) == 400);   // fp32 rows
  CHECK(attentionPrefetchRows(128 * 8, 256, l2) == kAttentionMinPrefetchRows);  // a 128-token prefill pass
  CHECK(attentionPrefetchRows(1 << 20, 256, l2) == kAttentionMinPrefetchRows);
  CHECK(attentionPrefetchRows(64, 256, 0) == kAttentionMinPrefetchRows);
  CHECK(attentionPrefetchRows(0, 256, l2) == kAttentionMinPrefetchRows);
}

TEST_CASE("attention shared memory layout", "[engine]") {
  for (int headDim : {64, 128, 256})
    for (int chunk : {1, 3, 236, 4097}) {
      const AttentionSharedLayout unsplit = attentionSharedLayout(chunk, headDim, 1);
      const AttentionSharedLayout split = attentionSharedLayout(chunk, headDim, 3);
      CHECK(unsplit.partial >= chunk);
      CHECK(unsplit.partial % 4 == 0);  // float4 partial sums
      CHECK(unsplit.mine - unsplit.partial == valueGroups(headDim) * headDim);
      CHECK(unsplit.floats == unsplit.mine);  // no merge state without splits
      CHECK(split.floats == split.mine + 2 + headDim);
      CHECK(attentionSharedBytes(chunk, headDim, 3) == size_t(split.floats) * sizeof(float));
    }
}
