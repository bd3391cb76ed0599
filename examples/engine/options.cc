// SPDX-License-Identifier: BSD-3-Clause
#include "options.h"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/cli_args.h"
#include "model.h"

namespace engine {

void printUsage(const char* program) {
  std::printf(
      "usage: %s [options]\n"
      "  --model PATH            llama2.c checkpoint (fp32), or Hugging Face checkpoint directory\n"
      "  --tokenizer PATH        llama2.c tokenizer.bin, or Hugging Face tokenizer.json\n"
      "                          (default: DIR/tokenizer.json when --model DIR has one)\n"
      "  --random-weights --shape NAME   llama3-1b | llama3-8b | qwen3-32b | tiny-llama | tiny-qwen3 | tiny-qwen2\n"
      "  --prompt TEXT           (default \"Once upon a time\")\n"
      "  --steps N               tokens to generate (default 128)\n"
      "  --temperature F --top-k N --top-p F --seed N   sampling (temperature 0: greedy)\n"
      "  --device cpu|gpu|auto   (auto: gpu when one is present)\n"
      "  --tp N                  tensor parallel ranks (gpu: one process per GPU)\n"
      "                          Under torchrun, mpirun or srun (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_*,\n"
      "                          SLURM_*; MASTER_ADDR/MASTER_PORT for the rendezvous) each process is one\n"
      "                          rank and the engine starts none; --tp, if given, must equal the world size\n"
      "  --collective rocenante|nccl   all-reduce of the gpu path (nccl: ROCENANTE_DISABLE=1)\n"
      "  --dtype f32|bf16|auto   gpu weights and activations (auto: f32 for llama2.c, bf16 otherwise)\n"
      "  --no-graph              do not capture the decode step in a CUDA graph\n"
      "  --no-gemv               cuBLAS for the bf16 decode products too (default: own GEMV kernel)\n"
      "  --fused-allreduce       gpu, --tp > 1, decode of 1-2 sequences: each row-parallel product sums its\n"
      "                          outputs over the ranks itself, through rocenante's device API\n"
      "                          (default: rcnAllReduce after it)\n"
      "  --fused-norm            gpu, bf16, --tp > 1 or --shard-of: a bf16 residual stream, and each all-reduce\n"
      "                          also adds it and normalizes it for the next product in one call\n"
      "                          (rcnAllReduceResidualRmsNorm; default: the norm fused into the next product)\n"
      "  --bench                 time prefill and decode instead of generating text\n"
      "  --batch LIST            bench batch sizes, e.g. 1,8 (default 1)\n"
      "  --prompt-len N          bench prefill tokens per sequence (default 128)\n"
      "  --decode-steps N        bench decode steps (default 64)\n"
      "  --json PATH             bench results as JSON\n"
      "  --quiet                 no streamed text, only the summary\n"
      "  --profile               bench: also time each operation of eager decode steps\n"
      "  --shard-of N            bench, gpu, --tp 1: time rank 0's shard of a TP=N split alone on this GPU,\n"
      "                          its all-reduces skipped: the compute part of a TP=N step, with fewer GPUs\n"
      "  --rank N --id-fd FD --error-fd FD   set by the engine for the ranks it starts itself (--tp N\n"
      "                          without a launcher); not for use by hand\n",
      program);
}

namespace {

// Whole text as a number: no leading blanks (strto* would skip them), nothing after.
bool wholeNumber(const std::string& value, const char* end) {
  return !value.empty() && !std::isspace(static_cast<unsigned char>(value[0])) && *end == '\0';
}

int toInt(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (!wholeNumber(value, end)) throw EngineError(flag + ": '" + value + "' is not an integer");
  if (errno == ERANGE || v < INT_MIN || v > INT_MAX) throw EngineError(flag + ": " + value + " is out of range");
  return int(v);
}

float toFloat(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const float v = std::strtof(value.c_str(), &end);
  if (!wholeNumber(value, end)) throw EngineError(flag + ": '" + value + "' is not a number");
  if (!std::isfinite(v)) throw EngineError(flag + ": " + value + " is not a finite number");
  return v;
}

uint64_t toSeed(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (!wholeNumber(value, end) || value[0] == '-' || errno == ERANGE)
    throw EngineError(flag + ": '" + value + "' is not a number from 0 to 2^64 - 1");
  return v;
}

std::vector<int> toIntList(const std::string& flag, const std::string& value) {
  std::vector<int> out;
  for (size_t begin = 0;;) {  // every item, the empty ones too ("1," is a mistake, not "1")
    const size_t comma = value.find(',', begin);
    out.push_back(toInt(flag, value.substr(begin, comma - begin)));
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

}  // namespace

// A flag given for a run that would not use it: refused by name, so that
// what the user asked for is never silently dropped.
void refuseUnused(const std::set<std::string>& given, std::initializer_list<const char*> flags, bool unused,
                  const char* why) {
  for (const char* flag : flags)
    if (unused && given.count(flag)) throw EngineError(std::string(flag) + " " + why);
}

namespace {

// Every option the engine takes, and whether it takes a value.
const std::vector<rcn::CliOption> kEngineOptions = {
    {"-h", false},
    {"--help", false},
    {"--model", true},
    {"--tokenizer", true},
    {"--random-weights", false},
    {"--shape", true},
    {"--prompt", true},
    {"--steps", true},
    {"--temperature", true},
    {"--top-k", true},
    {"--top-p", true},
    {"--seed", true},
    {"--device", true},
    {"--tp", true},
    {"--collective", true},
    {"--dtype", true},
    {"--no-graph", false},
    {"--no-gemv", false},
    {"--fused-allreduce", false},
    {"--fused-norm", false},
    {"--bench", false},
    {"--batch", true},
    {"--prompt-len", true},
    {"--decode-steps", true},
    {"--json", true},
    {"--quiet", false},
    {"--profile", false},
    {"--shard-of", true},
    {"--rank", true},
    {"--id-fd", true},
    {"--error-fd", true},
};

std::string nonEmptyPath(const rcn::CliArg& arg) {
  if (arg.value.empty()) throw EngineError(arg.name + " needs a path, not an empty string");
  return arg.value;
}

}  // namespace

EngineOptions parseOptions(int argc, char** argv) {
  EngineOptions o;
  std::vector<rcn::CliArg> args;
  std::string why;
  if (!rcn::parseCli(argc, argv, kEngineOptions, &args, &why)) throw EngineError(why + " (see --help)");
  std::set<std::string> given;
  for (const rcn::CliArg& arg : args) {
    const std::string& flag = arg.name;
    const std::string& value = arg.value;
    given.insert(flag);
    if (flag == "--help" || flag == "-h") {
      printUsage(argv[0]);
      std::exit(0);
    } else if (flag == "--model") o.modelPath = nonEmptyPath(arg);
    else if (flag == "--tokenizer") o.tokenizerPath = nonEmptyPath(arg);
    else if (flag == "--random-weights") o.randomWeights = true;
    else if (flag == "--shape") o.shape = value;
    else if (flag == "--prompt") o.prompt = value, o.promptGiven = true;
    else if (flag == "--steps") o.steps = toInt(flag, value);
    else if (flag == "--temperature") o.sampler.temperature = toFloat(flag, value);
    else if (flag == "--top-k") o.sampler.topK = toInt(flag, value);
    else if (flag == "--top-p") o.sampler.topP = toFloat(flag, value);
    else if (flag == "--seed") o.sampler.seed = toSeed(flag, value);
    else if (flag == "--device") o.device = value;
    else if (flag == "--tp") o.tp = toInt(flag, value), o.tpGiven = true;
    else if (flag == "--collective") o.collective = value;
    else if (flag == "--dtype") o.dtype = value;
    else if (flag == "--no-graph") o.cudaGraph = false;
    else if (flag == "--no-gemv") o.gemv = false;
    else if (flag == "--fused-allreduce") o.fuseAllReduce = true;
    else if (flag == "--fused-norm") o.fuseNorm = true;
    else if (flag == "--bench") o.bench = true;
    else if (flag == "--batch") o.batches = toIntList(flag, value);
    else if (flag == "--prompt-len") o.promptLen = toInt(flag, value);
    else if (flag == "--decode-steps") o.decodeSteps = toInt(flag, value);
    else if (flag == "--json") o.jsonPath = nonEmptyPath(arg);
    else if (flag == "--quiet") o.quiet = true;
    else if (flag == "--profile") o.profile = true;
    else if (flag == "--shard-of") o.shardOf = toInt(flag, value);
    else if (flag == "--rank") o.rank = toInt(flag, value);
    else if (flag == "--id-fd") o.idFd = toInt(flag, value);
    else if (flag == "--error-fd") o.errorFd = toInt(flag, value);
  }
  if (!o.randomWeights && o.modelPath.empty()) throw EngineError("give --model PATH or --random-weights --shape NAME");
  if (o.randomWeights && !o.modelPath.empty())
    throw EngineError("give --model PATH or --random-weights --shape NAME, not both");
  refuseUnused(given, {"--json", "--batch", "--prompt-len", "--decode-steps", "--profile"}, !o.bench,
               "sets up the --bench run: it needs --bench");
  refuseUnused(given, {"--prompt", "--steps", "--temperature", "--top-k", "--top-p"}, o.bench,
               "sets up text generation, which --bench does not run (--prompt-len, --decode-steps)");
  refuseUnused(given, {"--shape"}, !o.randomWeights, "names the model --random-weights builds: it needs it");
  if (o.randomWeights && o.shape.empty()) throw EngineError("--random-weights needs --shape");
  if (o.tp < 1) throw EngineError("--tp must be at least 1");
  if (o.shardOf < 1) throw EngineError("--shard-of must be at least 1");
  if (o.shardOf > 1 && (!o.bench || o.tp != 1 || o.device == "cpu"))
    throw EngineError("--shard-of times one GPU's shard: it needs --bench, --tp 1 and the gpu device");
  if (o.fuseNorm && o.fuseAllReduce)
    throw EngineError(
        "--fused-norm and --fused-allreduce both replace the all-reduces after the O and down products: "
        "choose one");
  if (o.shardOf > 1 && o.fuseAllReduce)
    throw EngineError("--shard-of skips the all-reduces: --fused-allreduce has nothing to fuse there");
  if (o.collective != "rocenante" && o.collective != "nccl")
    throw EngineError("--collective must be rocenante or nccl, not " + o.collective);
  if (o.device != "auto" && o.device != "cpu" && o.device != "gpu")
    throw EngineError("--device must be cpu, gpu or auto, not " + o.device);
  if (o.dtype != "auto" && o.dtype != "f32" && o.dtype != "bf16")
    throw EngineError("--dtype must be f32, bf16 or auto, not " + o.dtype);
  for (int b : o.batches)
    if (b < 1) throw EngineError("--batch sizes must be positive");
  if (o.steps < 0) throw EngineError("--steps must be 0 or more");
  if (o.promptLen < 1) throw EngineError("--prompt-len must be at least 1");
  if (o.decodeSteps < 1) throw EngineError("--decode-steps must be at least 1");
  if (o.sampler.temperature < 0) throw EngineError("--temperature must be 0 (greedy) or more");
  if (o.sampler.topP <= 0 || o.sampler.topP > 1) throw EngineError("--top-p must be in (0, 1]");
  if (o.sampler.topK < 0) throw EngineError("--top-k must be 0 (all tokens) or more");
  // Greedy decoding draws nothing: a sampling choice there would change nothing.
  const bool greedy = !o.bench && o.sampler.temperature == 0;
  refuseUnused(given, {"--top-k", "--top-p"}, greedy,
               "steers sampling, and temperature 0 (the default) decodes greedily: give --temperature > 0");
  refuseUnused(given, {"--seed"}, greedy && !o.randomWeights,
               "seeds sampling (and random weights), and temperature 0 (the default) decodes greedily: give "
               "--temperature > 0");
  return o;
}

void requireCpuOptions(const EngineOptions& o) {
  // (The cpu path's ranks sum over rocenante's host backend: no NCCL there.)
  const char* gpuOnly = o.bench                  ? "--bench"
                        : o.collective == "nccl" ? "--collective nccl"
                        : o.dtype == "bf16"      ? "--dtype bf16"
                        : !o.cudaGraph           ? "--no-graph"
                        : !o.gemv                ? "--no-gemv"
                        : o.fuseAllReduce        ? "--fused-allreduce"
                        : o.fuseNorm             ? "--fused-norm"
                                                 : nullptr;  // --profile needs --bench, refused above
  if (gpuOnly)
    throw EngineError(std::string(gpuOnly) + " is for the gpu path, and this run is on the cpu" +
                      (o.device == "auto" ? " (no GPU found; --device gpu to insist)" : ""));
}

}  // namespace engine
