// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_options.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cli_args.h"
#include "core/dtype.h"
#include "core/params.h"
#include "core/strings.h"
#include "sweep_methods_list.h"

namespace rcn::bench {
namespace {

// The types the sweep takes and their spellings, the short name first
// (NCCL's names and PyTorch's are accepted too).
struct DtypeSpelling {
  rcnDataType_t type;
  const char* names[3];
};
const DtypeSpelling kDtypeSpellings[] = {
    {rcnBfloat16, {"bf16", "bfloat16", nullptr}},
    {rcnFloat16, {"fp16", "half", "float16"}},
    {rcnFloat32, {"fp32", "float", "float32"}},
};

bool parseSize(const std::string& text, size_t* out, std::string* why) {
  int64_t value = 0;
  if (!parseIntText(text, &value, why)) return false;
  if (value <= 0) {
    *why = "must be positive";
    return false;
  }
  *out = static_cast<size_t>(value);
  return true;
}

bool parsePositiveInt(const std::string& text, int* out, std::string* why) {
  int64_t value = 0;
  if (!parseIntText(text, &value, why)) return false;
  if (value <= 0 || value > 1000000) {
    *why = "must be between 1 and 1000000";
    return false;
  }
  *out = static_cast<int>(value);
  return true;
}

bool parsePath(const std::string& text, std::string* out, std::string* why) {
  if (text.empty()) {
    *why = "needs a file name";
    return false;
  }
  *out = text;
  return true;
}

bool parseMode(const std::string& text, SweepOptions* out) {
  if (text == "graph") { out->graph = true; out->eager = false; return true; }
  if (text == "eager") { out->graph = false; out->eager = true; return true; }
  if (text == "both") { out->graph = true; out->eager = true; return true; }
  return false;
}

bool parseOp(const std::string& text, rcnRedOp_t* out) {
  if (text == "sum") { *out = rcnSum; return true; }
  if (text == "max") { *out = rcnMax; return true; }
  if (text == "min") { *out = rcnMin; return true; }
  return false;
}

// Applies one option that takes a value. Returns false with why set.
bool applyValued(const std::string& name, const std::string& value, SweepOptions* o, std::string* why) {
  std::string reason;
  bool ok = true;
  if (name == "--gpus" || name == "--nprocs") ok = parsePositiveInt(value, &o->nprocs, &reason);
  else if (name == "--min-bytes") ok = parseSize(value, &o->minBytes, &reason);
  else if (name == "--max-bytes") ok = parseSize(value, &o->maxBytes, &reason), o->maxBytesGiven = true;
  else if (name == "--factor") {
    char* end = nullptr;
    o->factor = std::strtod(value.c_str(), &end);
    ok = end && *end == '\0' && o->factor > 1.0 && std::isfinite(o->factor);
    if (!ok) reason = "must be a number greater than 1";
  } else if (name == "--dtype") {
    ok = parseDtype(value, &o->dtype);
    if (!ok) reason = "must be bf16, fp16 or fp32";
  } else if (name == "--op") {
    ok = parseOp(value, &o->op);
    if (!ok) reason = "must be sum, max or min";
  } else if (name == "--mode") {
    ok = parseMode(value, o);
    if (!ok) reason = "must be graph, eager or both";
  } else if (name == "--methods") {
    o->methods = splitNonEmpty(value, ',');
    if (o->methods.empty()) {
      ok = false;
      reason = "names no method (known: " + methodNamesText() + ")";
    }
    for (const std::string& m : o->methods) {
      if (methodIndex(m) < 0) {
        reason = "unknown method '" + m + "' (known: " + methodNamesText() + ")";
        ok = false;
        break;
      }
    }
  } else if (name == "--trials") {
    // Each trial moves about 512 MB of messages (sweep_plan.h): 1000 of them are minutes a point.
    ok = parsePositiveInt(value, &o->trials, &reason);
    if (ok && o->trials > kMaxTrials) ok = false, reason = "must be at most " + std::to_string(kMaxTrials);
  } else if (name == "--graph-ops") ok = parsePositiveInt(value, &o->opsPerGraph, &reason);
  else if (name == "--rotate-bytes") ok = parseSize(value, &o->rotateBytes, &reason);
  else if (name == "--oneshot-max-bytes") ok = parseSize(value, &o->oneShotMaxBytes, &reason);
  else if (name == "--json") ok = parsePath(value, &o->jsonPath, &reason);
  else if (name == "--csv") ok = parsePath(value, &o->csvPath, &reason);
  else if (name == "--write-policy") ok = parsePath(value, &o->policyPath, &reason);
  else if (name == "--note") o->note = value;
  else {
    *why = "unknown option " + name;
    return false;
  }
  if (!ok) *why = name + " " + value + ": " + reason;
  return ok;
}

// Every option the sweep takes; applyValued sets those with a value.
const std::vector<CliOption> kSweepOptions = {
    {"-h", false},
    {"--help", false},
    {"--no-verify", false},
    {"--no-progress", false},
    {"--gpus", true},
    {"--nprocs", true},
    {"--min-bytes", true},
    {"--max-bytes", true},
    {"--factor", true},
    {"--dtype", true},
    {"--op", true},
    {"--mode", true},
    {"--methods", true},
    {"--trials", true},
    {"--graph-ops", true},
    {"--rotate-bytes", true},
    {"--oneshot-max-bytes", true},
    {"--json", true},
    {"--csv", true},
    {"--write-policy", true},
    {"--note", true},
};

// The smallest multiple of element that is at least bytes.
size_t roundUpTo(size_t bytes, size_t element) { return (bytes + element - 1) / element * element; }

// The range holds a whole number of elements (how many sizes it holds is
// checked once --max-bytes is final: listSweepSizes).
bool checkSizeRange(const SweepOptions& o, std::string* why) {
  const size_t element = dtypeSize(o.dtype);
  if (roundUpTo(o.minBytes, element) <= o.maxBytes) return true;
  *why = "no whole number of " + std::string(dtypeShortName(o.dtype)) + " elements (" + std::to_string(element) +
         " bytes each) lies between --min-bytes " + std::to_string(o.minBytes) + " and --max-bytes " +
         std::to_string(o.maxBytes);
  return false;
}

}  // namespace

bool parseSweepArgs(int argc, const char* const* argv, SweepOptions* out, std::string* why) {
  SweepOptions o;
  std::vector<CliArg> args;
  if (!parseCli(argc, argv, kSweepOptions, &args, why)) return false;
  for (const CliArg& arg : args) {
    if (arg.name == "-h" || arg.name == "--help") o.help = true;
    else if (arg.name == "--no-verify") o.verify = false;
    else if (arg.name == "--no-progress") o.progress = false;
    else if (!applyValued(arg.name, arg.value, &o, why)) return false;
  }
  if (o.minBytes > o.maxBytes && !o.maxBytesGiven) o.maxBytes = o.minBytes;  // not a default's fault: that size alone
  if (o.minBytes > o.maxBytes) {
    *why = "--min-bytes (" + std::to_string(o.minBytes) + ") is larger than --max-bytes (" +
           std::to_string(o.maxBytes) + ")";
    return false;
  }
  if (!checkSizeRange(o, why)) return false;
  const std::string* outputs[] = {&o.jsonPath, &o.csvPath, &o.policyPath};
  const char* outputNames[] = {"--json", "--csv", "--write-policy"};
  for (int a = 0; a < 3; ++a)
    for (int b = a + 1; b < 3; ++b)
      if (!outputs[a]->empty() && *outputs[a] == *outputs[b]) {
        *why = std::string(outputNames[a]) + " and " + outputNames[b] + " name the same file, " + *outputs[a] +
               ": one would overwrite the other";
        return false;
      }
  *out = o;
  return true;
}

bool listSweepSizes(const SweepOptions& o, std::vector<size_t>* sizes, std::string* why) {
  *sizes = sweepSizes(o.minBytes, o.maxBytes, o.factor, dtypeSize(o.dtype), kMaxSweepSizes + 1);
  if (sizes->size() <= size_t(kMaxSweepSizes)) return true;
  char factor[32];
  snprintf(factor, sizeof factor, "%.15g", o.factor);
  *why = "--factor " + std::string(factor) + " from " + formatBytes(o.minBytes) + " to " + formatBytes(o.maxBytes) +
         " gives more than " + std::to_string(kMaxSweepSizes) + " sizes (raise --factor or narrow the range)";
  return false;
}

std::string sweepUsage(const char* program) {
  std::string p = program ? program : "allreduce_sweep";
  return "usage: " + p + " [options]\n"
    "Times all-reduce with rocenante and NCCL on the same buffers, eagerly and in CUDA graphs.\n"
    "Starts one process per local GPU, or joins a launch from RANK/WORLD_SIZE/LOCAL_RANK/\n"
    "MASTER_ADDR/MASTER_PORT (torchrun) or the OMPI_/PMI_/SLURM_ equivalents.\n"
    "  --gpus N               local processes to start (default: one per GPU; 2 on the host backend)\n"
    "  --min-bytes B          smallest message (default 8; K/M/G suffixes)\n"
    "  --max-bytes B          no message above this (default 64M on GPUs: 8 B to 32M by 4;\n"
    "                         1M on the host backend: 8 B to 512K)\n"
    "  --factor F             size step (default 4)\n"
    "  --dtype T              bf16 (default), fp16, fp32\n"
    "  --op OP                sum (default), max, min\n"
    "  --mode M               graph, eager, both (default)\n"
    "  --methods LIST         comma list of " + methodNamesText() + "\n"
    "  --trials N             timed trials per point (default 5, at most 1000): median, min, max, IQR\n"
    "  --graph-ops K          all-reduces per CUDA graph (default 20)\n"
    "  --rotate-bytes B       pool the buffers of sizes from 256K up rotate through (at most 256\n"
    "                         slots of 4K or more), so they leave L2 (default 128M; GPUs only)\n"
    "  --oneshot-max-bytes B  largest message the forced one-shot communicator takes (default 64M)\n"
    "  --no-verify            skip the check against the CPU reference (#wrong: - in the table,\n"
    "                         -1 in CSV and JSON)\n"
    "  --no-progress          no progress line on stderr\n"
    "  --json FILE, --csv FILE  write every result\n"
    "  --write-policy FILE    write the measured crossovers as a rocenante policy file\n"
    "  --note TEXT            free text stored in the JSON (commit, machine)\n";
}

std::vector<size_t> sweepSizes(size_t minBytes, size_t maxBytes, double factor, size_t elemSize, size_t limit) {
  std::vector<size_t> sizes;
  if (elemSize == 0 || factor <= 1.0 || minBytes > maxBytes) return sizes;
  const double logFactor = std::log(factor);
  for (double step = 0; sizes.size() <= limit;) {
    const double exact = double(minBytes) * std::pow(factor, step);
    if (exact > double(maxBytes) * (1.0 + 1e-9)) break;
    size_t bytes = static_cast<size_t>(std::llround(exact));
    if (bytes > maxBytes) bytes = maxBytes;
    bytes = bytes / elemSize * elemSize;
    if (bytes < minBytes) bytes = roundUpTo(minBytes, elemSize);  // never below the minimum
    if (bytes <= maxBytes && (sizes.empty() || bytes > sizes.back())) sizes.push_back(bytes);
    // The next step whose size can differ from the last one: a factor just
    // above 1 jumps there instead of crawling through equal sizes.
    const double next = sizes.empty() ? 0 : std::ceil(std::log((sizes.back() + elemSize - 0.5) / minBytes) / logFactor);
    step = std::max(step + 1, next);
  }
  return sizes;
}

bool parseDtype(const std::string& text, rcnDataType_t* out) {
  for (const DtypeSpelling& d : kDtypeSpellings)
    for (const char* name : d.names)
      if (name && text == name) return *out = d.type, true;
  return false;
}

const char* dtypeShortName(rcnDataType_t t) {
  for (const DtypeSpelling& d : kDtypeSpellings)
    if (d.type == t) return d.names[0];
  return "?";
}

std::string formatBytes(size_t bytes) {
  static const char* suffixes[] = {"", "K", "M", "G"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + suffixes[unit];
}

}  // namespace rcn::bench
