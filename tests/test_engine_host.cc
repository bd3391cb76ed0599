// The engine's CPU path with one process per tensor-parallel rank, joined by
// rcnAllReduce over rocenante's host backend (RcnHostAllReduce): on
// stories260K, TP=2 greedy tokens equal TP=1 and the logits agree within 1e-4
// at every position; every rank sees the same logits. Then `rcn_engine
// --device cpu --tp 2` (the launcher) prints the same story as TP=1, and so
// do two rcn_engine processes started with torchrun's variables.
#include <catch2/catch_test_macros.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu_model.h"
#include "host_allreduce.h"
#include "llama2c_loader.h"
#include "sampler.h"
#include "shard.h"
#include "support/free_port.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/shared_model.h"
#include "test_engine_naive.h"
#include "tokenizer.h"

using namespace engine;

namespace {

constexpr int kSteps = 40;

struct Trace {
  std::vector<int> tokens;                 // prompt, then greedy tokens
  std::vector<std::vector<float>> logits;  // at every position
};

// Greedy decoding of `prompt` by one rank.
Trace decode(CpuModel& model, const std::vector<int>& prompt) {
  Trace t;
  t.tokens = prompt;
  for (int pos = 0; pos + 1 < int(prompt.size()) + kSteps; ++pos) {
    t.logits.push_back(model.forward(t.tokens[pos], pos));
    if (pos + 1 >= int(prompt.size())) t.tokens.push_back(argmax(t.logits.back().data(), model.config().vocab));
  }
  return t;
}

// One rank process: its shard, the host-backend communicator, the same decode.
int runRank(const ModelWeights& full, const std::vector<int>& prompt, const Trace& want, const rcnUniqueId& id,
            int rank, int size) {
  setenv("ROCENANTE_BACKEND", "host", 1);
  rcnComm_t comm = nullptr;
  if (rcnCommInitRank(&comm, size, id, rank) != rcnSuccess) return 70;
  int failures = 0;
  {
    RcnHostAllReduce allReduce(comm);
    const ShardLayout layout = planShard(full.config, size, rank);
    CpuModel model(shardWeights(full, layout), layout, &allReduce);
    const Trace got = decode(model, prompt);
    if (got.tokens != want.tokens) {
      std::printf("rank %d: greedy tokens differ from TP=1\n", rank);
      ++failures;
    }
    double worst = 0;
    for (size_t p = 0; p < want.logits.size(); ++p)
      for (size_t i = 0; i < want.logits[p].size(); ++i)
        worst = std::max(worst, double(std::fabs(got.logits[p][i] - want.logits[p][i])));
    std::printf("rank %d: max |logit - TP=1| over %zu positions: %.3g\n", rank, want.logits.size(), worst);
    if (worst > 1e-4) ++failures;
    // Every rank must see bit-identical logits: each puts its last ones in its
    // own segment (zeros elsewhere), so the sum gathers them exactly.
    const std::vector<float>& last = got.logits.back();
    std::vector<float> gathered(last.size() * size, 0.0f);
    std::copy(last.begin(), last.end(), gathered.begin() + rank * last.size());
    if (rcnAllReduce(gathered.data(), gathered.data(), gathered.size(), rcnFloat32, rcnSum, comm, nullptr) !=
        rcnSuccess)
      return 71;
    for (int r = 0; r < size; ++r)
      if (!std::equal(last.begin(), last.end(), gathered.begin() + r * last.size())) {
        std::printf("rank %d: logits differ from rank %d's\n", rank, r);
        ++failures;
      }
  }
  if (rcnCommDestroy(comm) != rcnSuccess) ++failures;
  return failures;
}

}  // namespace

TEST_CASE("stories260K TP=2 over the host backend equals TP=1", "[engine][host]") {
  const ModelWeights full = loadLlama2c(rcn::test::requireSharedModel("stories260K.bin"));
  const Llama2cTokenizer tok(rcn::test::requireSharedModel("tok512.bin"), 512);
  const std::vector<int> prompt = tok.encode("Once upon a time", true);
  NoAllReduce none;
  CpuModel reference(full, planShard(full.config, 1, 0), &none);
  const Trace want = decode(reference, prompt);

  rcnUniqueId id;
  REQUIRE(rcnGetUniqueId(&id) == rcnSuccess);
  rcn::test::checkRanks(
      rcn::test::runRanks(2, [&](int rank) { return runRank(full, prompt, want, id, rank, 2); }, 60));
}

#ifdef RCN_ENGINE_BIN
namespace {

// The model arguments, looked up when a case first runs (not at static
// initialisation, where a missing model would exit before Catch2 starts).
const std::string& engineArgs() {
  static const std::string args = " --device cpu --model " + rcn::test::requireSharedModel("stories260K.bin") +
                                  " --tokenizer " + rcn::test::requireSharedModel("tok512.bin") + " --steps 60 2>/dev/null";
  return args;
}

// Starts rcn_engine through the shell (env: VAR=value assignments before it).
FILE* startEngine(const std::string& env, const std::string& extra) {
  FILE* pipe = popen((env + " " + RCN_ENGINE_BIN + extra + engineArgs()).c_str(), "r");
  REQUIRE(pipe);
  return pipe;
}

// Its stdout, once it has exited 0.
std::string finishEngine(FILE* pipe) {
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return out;
}

}  // namespace

// The program's own launcher: two rank processes print what one process does.
TEST_CASE("rcn_engine --device cpu --tp 2 prints the TP=1 story", "[engine][host][cli]") {
  const std::string one = finishEngine(startEngine("", "")), two = finishEngine(startEngine("", " --tp 2"));
  CHECK(one.rfind("Once upon a time, there was a little girl named Lily.", 0) == 0);
  CHECK(two == one);
}

// Started as torchrun does: each process is one rank, none is started by the
// engine; they meet at MASTER_ADDR:MASTER_PORT (rcnCommInitFromLaunch).
TEST_CASE("rcn_engine under torchrun-style variables prints the TP=1 story on rank 0", "[engine][host][cli]") {
  const std::string one = finishEngine(startEngine("", ""));
  const std::string world = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(rcn::test::freePort()) +
                            " ROCENANTE_BACKEND=host ROCENANTE_BOOTSTRAP_TIMEOUT_MS=30000";
  FILE* rank1 = startEngine("RANK=1 LOCAL_RANK=1 " + world, "");
  FILE* rank0 = startEngine("RANK=0 LOCAL_RANK=0 " + world, "");
  const std::string out0 = finishEngine(rank0), out1 = finishEngine(rank1);
  CHECK(one.rfind("Once upon a time, there was a little girl named Lily.", 0) == 0);
  CHECK(out0 == one);
  CHECK(out1.empty());
}
#endif
