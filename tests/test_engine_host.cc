// SPDX-License-Identifier: BSD-3-Clause
// The engine's CPU path with one process per tensor-parallel rank, joined by
// rcnAllReduce over rocenante's host backend (RcnHostAllReduce): on
// stories260K, TP=2 greedy tokens equal TP=1 and the logits agree within 1e-4
// at every position; every rank sees the same logits. Then `rcn_engine
// --device cpu --tp 2` (the launcher) prints the same story as TP=1, and so
// do two rcn_engine processes started with torchrun's variables. Without model
// files: the launcher prints an error every rank hits once, and each rank's
// own; on tiny-llama's random weights, a run that fills the context before
// --steps notes it once and succeeds.
#include <catch2/catch_test_macros.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cpu_model.h"
#include "host_allreduce.h"
#include "launcher.h"
#include "llama2c_loader.h"
#include "sampler.h"
#include "shard.h"
#include "support/free_port.h"
#include "support/engine_run.h"
#include "support/scoped_env.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/shared_model.h"
#include "support/temp_file.h"
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

namespace {

// A rank process that hands `message` to the launcher as the engine's ranks do
// (reportError) and exits 1.
RankProcess failingRank(const std::string& message) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    reportError(message, fds[1]);
    _exit(1);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return {pid, fds[0]};
}

struct Supervised {
  int result = -1;
  std::string err;  // what superviseRanks printed
};

Supervised supervise(const std::vector<RankProcess>& ranks) {
  const rcn::test::TempFile file("", "rcn_supervise_stderr");
  std::fflush(stderr);
  const int saved = dup(2), capture = open(file.path().c_str(), O_WRONLY);
  REQUIRE((saved >= 0 && capture >= 0));
  dup2(capture, 2);
  close(capture);
  Supervised s;
  s.result = superviseRanks(ranks);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  for (const RankProcess& rank : ranks) close(rank.errorFd);
  std::ifstream in(file.path());
  s.err.assign(std::istreambuf_iterator<char>(in), {});
  return s;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++count;
  return count;
}

}  // namespace

// An error every rank hits shows once; one rank's own error still shows, and so
// does a message longer than a pipe holds (read as it comes, or its rank would block).
TEST_CASE("the launcher prints each distinct error of its ranks once", "[engine][host]") {
  const std::string shared = "the prompt is 600 tokens; the model's context holds 512 positions";
  const std::string own = "local rank 2 has no GPU of its own";
  const std::string longOne(200000, 'x');
  const Supervised s =
      supervise({failingRank(shared), failingRank(shared), failingRank(own), failingRank(longOne)});
  INFO(s.err.substr(0, 2000));
  CHECK(s.result == 1);
  CHECK(occurrences(s.err, "rcn_engine: error: " + shared + "\n") == 1);
  CHECK(occurrences(s.err, "rcn_engine: error: " + own + "\n") == 1);
  CHECK(occurrences(s.err, "rcn_engine: error: " + longOne + "\n") == 1);
  CHECK(occurrences(s.err, " exited with 1\n") == 1);
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

namespace {

using rcn::test::EngineRun;
using rcn::test::runEngine;

// tiny-llama (random weights, no model files needed) holds 128 positions.
const std::string kTiny = "--device cpu --random-weights --shape tiny-llama";

}  // namespace

// A launcher killed by its pid alone takes its ranks with it: here a
// "launcher" forks a "rank" that calls dieWithLauncher and sleeps, hands its
// pid over a pipe, and is killed; the rank must be gone within a second.
TEST_CASE("a rank process dies with its launcher", "[engine][host]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t middle = fork();
  REQUIRE(middle >= 0);
  if (middle == 0) {
    const pid_t self = getpid();
    const pid_t rank = fork();
    if (rank == 0) {
      dieWithLauncher(self);
      sleep(30);
      _exit(0);
    }
    (void)!write(fds[1], &rank, sizeof rank);
    pause();
    _exit(0);
  }
  close(fds[1]);
  pid_t rank = -1;
  REQUIRE(read(fds[0], &rank, sizeof rank) == sizeof rank);
  close(fds[0]);
  usleep(100000);  // the rank has run dieWithLauncher
  REQUIRE(kill(middle, SIGKILL) == 0);
  REQUIRE(waitpid(middle, nullptr, 0) == middle);
  // Gone: no such process, or a zombie its new parent has not reaped yet.
  auto isGone = [rank] {
    std::ifstream stat("/proc/" + std::to_string(rank) + "/stat");
    std::string pid, name, state;
    return !(stat >> pid >> name >> state) || state == "Z";
  };
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = isGone();
    if (!gone) usleep(10000);
  }
  if (!gone) kill(rank, SIGKILL);  // not ours to reap (re-parented): just do not leave it
  CHECK(gone);
}

// The ranks hand their errors to the launcher: one every rank hits shows once, not once per rank.
TEST_CASE("rcn_engine --tp 2 prints an error every rank hits once", "[engine][host][cli]") {
  // A prompt for a model without a tokenizer: every rank refuses it.
  const EngineRun run = runEngine(kTiny + " --tp 2 --prompt 'Once upon a time'");
  INFO(run.err);
  CHECK(run.status == 1);
  CHECK(occurrences(run.err, "--prompt needs a tokenizer") == 1);
  CHECK(occurrences(run.err, "error:") == 1);
  CHECK(occurrences(run.err, " exited with 1\n") == 1);
}

// A tokenizer that cannot be read fails before the model loads, in the
// launcher itself: no rank starts.
TEST_CASE("rcn_engine --tp 2 refuses an unreadable tokenizer before starting ranks", "[engine][host][cli]") {
  const EngineRun run = runEngine(kTiny + " --tp 2 --tokenizer /nonexistent/tok512.bin");
  INFO(run.err);
  CHECK(run.status == 1);
  CHECK(occurrences(run.err, "rcn_engine: error: /nonexistent/tok512.bin: cannot open (No such file or directory)\n") == 1);
  CHECK(occurrences(run.err, "error:") == 1);
  CHECK(occurrences(run.err, "exited with") == 0);
}

// The launcher hands each rank the id through a pipe, never on the command
// line (which every local user can read in /proc): the --tp 2 runs above get
// it that way; a rank started by hand without the pipe is told what it lacks.
TEST_CASE("rcn_engine --rank without the launcher's id pipe says so", "[engine][host][cli]") {
  const EngineRun run = runEngine(kTiny + " --tp 2 --rank 1 --steps 2");
  INFO(run.err);
  CHECK(run.status == 1);
  CHECK(occurrences(run.err, "--rank without --id-fd") == 1);
  const EngineRun closed = runEngine(kTiny + " --tp 2 --rank 1 --id-fd 99 --steps 2");
  INFO(closed.err);
  CHECK(closed.status == 1);
  CHECK(occurrences(closed.err, "--id-fd 99 gave 0 of the id's 128 bytes") == 1);
}

// The library's reason reaches the message even when its log prints nothing.
TEST_CASE("rcn_engine names the library's reason when a communicator cannot be made", "[engine][host][cli]") {
  rcn::test::ScopedEnv quiet("ROCENANTE_DEBUG", "NONE");
  rcn::test::ScopedEnv junk("ROCENANTE_MAX_BYTES", "junk");
  const EngineRun run = runEngine(kTiny + " --tp 2 --steps 2");
  INFO(run.err);
  CHECK(run.status == 1);
  CHECK(occurrences(run.err, "rcn_engine: error: rcnCommInitRank: ROCENANTE_MAX_BYTES: 'junk' is not an integer\n") == 1);
}

// The prompt is BOS alone, so 127 tokens fill the context: more steps stop there, with a note
// from rank 0 alone, and the run still succeeds.
TEST_CASE("rcn_engine notes once that generation stopped at the end of the context", "[engine][host][cli]") {
  const std::string note =
      "rcn_engine: note: generation stopped at the end of the context (128 positions, prompt included) after 127 "
      "of --steps 200 tokens\n";
  for (const char* tp : {"1", "2"}) {
    const EngineRun run = runEngine(kTiny + " --steps 200 --tp " + tp);
    INFO("--tp " << tp << ", stderr:\n" << run.err);
    CHECK(run.status == 0);
    CHECK(occurrences(run.out, " ") == 127);  // without a tokenizer each token prints as its id and a blank
    CHECK(occurrences(run.err, note) == 1);
  }
  // Exactly the steps that fit: nothing to note.
  const EngineRun fits = runEngine(kTiny + " --steps 127");
  INFO(fits.err);
  CHECK(fits.status == 0);
  CHECK(occurrences(fits.out, " ") == 127);
  CHECK(occurrences(fits.err, "note:") == 0);
}
#endif
