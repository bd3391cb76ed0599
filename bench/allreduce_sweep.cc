// SPDX-License-Identifier: BSD-3-Clause
// allreduce_sweep: times all-reduce with rocenante and with NCCL in the same
// run, on the same buffers, eagerly and inside CUDA graphs, and says where
// rocenante stops winning. See docs/PERF.md for the method and the numbers.
//
// Flow: parse options -> join or start the ranks -> pick the GPU (or the host
// backend) -> allocate the buffer pools -> create every method's communicator
// -> for each size, mode and method: run the point on every rank, gather the
// timings on rank 0 -> print the tables, write JSON/CSV/policy.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/params.h"
#include "core/user_file.h"
#include "sweep_check.h"
#include "sweep_launch.h"
#include "sweep_methods.h"
#include "sweep_options.h"
#include "sweep_plan.h"
#include "sweep_policy.h"
#include "sweep_preflight.h"
#include "sweep_report.h"
#include "sweep_runner.h"
#include "sweep_world.h"

namespace rcn::bench {
namespace {

// The host backend moves bytes through the CPU: a smaller default sweep.
constexpr size_t kHostDefaultMaxBytes = 1u << 20;

int fail(const World* world, const std::string& what) {
  std::fprintf(stderr, "allreduce_sweep%s: %s\n",
               world ? (" rank " + std::to_string(world->rank)).c_str() : "", what.c_str());
  return 1;
}

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

std::string commandLine(int argc, char** argv) {
  std::string text;
  for (int i = 0; i < argc; ++i) text += (i ? " " : "") + std::string(argv[i]);
  return text;
}

// Shows which point runs now: one rewritten line on a terminal, else one line per size.
class Progress {
 public:
  Progress(bool enabled, size_t total) : enabled_(enabled), total_(total), tty_(isatty(2)) {}
  void point(size_t sizeIndex, size_t bytes, Mode mode, const char* method) {
    if (!enabled_ || !tty_) return;
    std::fprintf(stderr, "\r[%zu/%zu] %8s %-5s %-18s", sizeIndex + 1, total_, formatBytes(bytes).c_str(),
                 modeName(mode), method);
    std::fflush(stderr);
  }
  void sizeDone(size_t sizeIndex, size_t bytes) {
    if (!enabled_ || tty_) return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
    std::fprintf(stderr, "progress: %zu/%zu sizes done (%s), %.1f s\n", sizeIndex + 1, total_,
                 formatBytes(bytes).c_str(), s);
  }
  void finish() {
    if (enabled_ && tty_) std::fprintf(stderr, "\r%60s\r", "");
  }

 private:
  bool enabled_;
  size_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point begin_ = std::chrono::steady_clock::now();
};

// Combines every rank's outcome of one point: the worst time, the summed
// #wrong, or the first failure (by rank).
Point combine(const std::vector<RankPoint>& ranks, int method, Mode mode, const PointPlan& plan) {
  Point p;
  p.method = method;
  p.mode = mode;
  p.bytes = plan.bytes;
  p.count = plan.count;
  std::vector<TimeStats> stats;
  long long wrong = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].ok) {
      p.note = (ranks.size() > 1 ? "rank " + std::to_string(r) + ": " : "") + ranks[r].why;
      return p;
    }
    TimeStats s;
    s.median = ranks[r].median;
    s.min = ranks[r].min;
    s.max = ranks[r].max;
    s.q1 = ranks[r].q1;
    s.q3 = ranks[r].q3;
    s.samples = ranks[r].samples;
    stats.push_back(s);
    wrong = ranks[r].wrong < 0 || wrong < 0 ? -1 : wrong + ranks[r].wrong;
  }
  p.measured = true;
  p.us = worstOf(stats);
  p.wrong = wrong;
  return p;
}

struct Setup {
  SweepOptions opts;
  bool gpu = false;
  int gpus = 0;
  std::vector<size_t> sizes;
};

void addMeta(const Setup& s, const World& world, const MethodSet& methods, int argc, char** argv,
             SweepResults* results) {
  auto& m = results->meta;
  m.emplace_back("date", utcNow());
  m.emplace_back("host", world.hostname);
  m.emplace_back("nodes", std::to_string(world.nnodes));
  m.emplace_back("launch", world.launch.source);
  m.emplace_back("command", commandLine(argc, argv));
  int version = 0;
  if (rcnGetVersion(&version) == rcnSuccess)  // as the log prints it: MAJOR * 10000 + MINOR * 100 + PATCH
    m.emplace_back("rocenante_version", std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
                                            "." + std::to_string(version % 100));
  if (s.gpu) {
    cudaDeviceProp prop{};
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess)
      m.emplace_back("gpu", prop.name);
    if (ncclGetVersion(&version) == ncclSuccess) m.emplace_back("nccl_version", std::to_string(version));
  }
  for (int i = 0; i < kNumMethods; ++i)
    if (methods.byIndex[i] && !methods.byIndex[i]->describe().empty())
      m.emplace_back(kMethods[i].name, methods.byIndex[i]->describe());
  if (!s.opts.note.empty()) m.emplace_back("note", s.opts.note);
}

// Runs every (size, mode, method) point; on rank 0, fills results.
rcnResult_t sweep(const Setup& s, World* world, Pools* pools, MethodSet* methods, SweepResults* results,
                  std::string* why) {
  PointRunner runner(s.opts, world, pools, s.gpu);
  if (!runner.init(why)) return rcnUnhandledCudaError;
  std::vector<Mode> modes;
  if (s.gpu && s.opts.graph) modes.push_back(Mode::Graph);
  if (s.opts.eager) modes.push_back(Mode::Eager);  // the host backend was refused without it
  Progress progress(s.opts.progress && world->rank == 0, s.sizes.size());
  // Why a method stopped partway, per mode: a method that cannot be captured
  // in a graph may still run eagerly.
  std::vector<std::string> broken[2] = {std::vector<std::string>(kNumMethods), std::vector<std::string>(kNumMethods)};
  size_t elem = dtypeSize(s.opts.dtype);
  for (size_t si = 0; si < s.sizes.size(); ++si) {
    size_t bytes = s.sizes[si];
    SizeData data;  // fresh inputs and their reference, shared by every method and mode at this size
    makeSizeData(sizeSeed(bytes), world->nranks, bytes / elem, s.opts.dtype, s.opts.op, s.opts.verify, &data);
    for (Mode mode : modes) {
      for (int m = 0; m < kNumMethods; ++m) {
        if (!methods->byIndex[m]) continue;
        PointPlan plan = planPoint(bytes, elem, pools->bytes, s.opts.opsPerGraph, s.gpu);
        Point point;
        point.method = m;
        point.mode = mode;
        point.bytes = plan.bytes;
        point.count = plan.count;
        std::string& stopped = broken[static_cast<int>(mode)][m];
        if (!stopped.empty()) {
          point.note = "skipped after an earlier failure";
        } else if (bytes > methods->byIndex[m]->maxBytes()) {
          point.note = "above its fast-path slot (" + formatBytes(methods->byIndex[m]->maxBytes()) +
                       "; --oneshot-max-bytes)";
        } else {
          progress.point(si, bytes, mode, kMethods[m].name);
          RankPoint mine = runner.run(*methods->byIndex[m], mode, plan, data);
          std::vector<RankPoint> all;
          if (gatherAll(world->bootstrap.get(), mine, &all) != rcnSuccess) {
            *why = "gathering results over the bootstrap failed (a rank has died?)";
            return rcnRemoteError;
          }
          point = combine(all, m, mode, plan);
          if (!point.measured) stopped = point.note;
        }
        results->points.push_back(point);
      }
    }
    progress.sizeDone(si, bytes);
  }
  progress.finish();
  for (Mode mode : modes)
    for (int m = 0; m < kNumMethods; ++m)
      if (!broken[static_cast<int>(mode)][m].empty() && world->rank == 0)
        std::fprintf(stderr, "allreduce_sweep: %s (%s) failed and was skipped from then on: %s\n",
                     kMethods[m].name, modeName(mode), broken[static_cast<int>(mode)][m].c_str());
  return rcnSuccess;
}

// Writes the files asked for; false if one could not be written.
bool writeOutputs(const Setup& s, const World& world, const SweepResults& results) {
  const std::string topoClass = world.nnodes == 1 ? "single_host" : "default";
  const std::string& policy = s.opts.policyPath;
  const PolicyChoice choice = choosePolicy(results);
  const bool setsAnything = policySetsAnything(choice);
  struct Output {
    const std::string& path;
    std::function<std::string()> text;
    std::string noteOnceWritten;  // printed to stdout after a successful write
  };
  const Output outputs[] = {
      {s.opts.jsonPath, [&] { return toJson(results); }, ""},
      {s.opts.csvPath, [&] { return toCsv(results); }, ""},
      {policy, [&] { return policyYaml(results, choice, topoClass); },
       setsAnything ? "# policy written to " + policy + " (use it with ROCENANTE_POLICY=" + policy + ")\n"
                    : "# policy written to " + policy + ": it sets nothing (no crossover against NCCL was measured; "
                      "its comments say why), so the built-in thresholds stand\n"}};
  bool written = true;
  for (const Output& out : outputs) {
    std::string why;
    if (out.path.empty()) continue;
    if (!writeOutputFile(out.path, out.text(), &why)) {
      fail(&world, "cannot write " + why);
      written = false;
    } else {
      std::fputs(out.noteOnceWritten.c_str(), stdout);
    }
  }
  return written;
}

bool outputsAsked(const SweepOptions& o) {
  return !o.jsonPath.empty() || !o.csvPath.empty() || !o.policyPath.empty();
}

bool anyMeasured(const SweepResults& results) {
  return std::any_of(results.points.begin(), results.points.end(), [](const auto& p) { return p.measured; });
}

// Picks this rank's GPU, or the host backend when there is none. A launcher
// that gives each process one GPU (CUDA_VISIBLE_DEVICES per task) leaves one
// visible: use it whatever the local rank.
bool chooseDevice(Setup* s, const World& world, std::string* why) {
  if (!s->gpu) return true;
  int device = s->gpus == 1 ? 0 : world.localRank;
  if (device >= s->gpus) {
    *why = "local rank " + std::to_string(world.localRank) + " has no GPU of its own (" + std::to_string(s->gpus) +
           " visible); start at most one rank per GPU";
    return false;
  }
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) *why = std::string("cudaSetDevice: ") + cudaGetErrorString(err);
  return err == cudaSuccess;
}

int runSweep(int argc, char** argv) {
  Setup s;
  std::string why;
  if (!parseSweepArgs(argc, argv, &s.opts, &why)) {
    std::fprintf(stderr, "allreduce_sweep: %s\n%s", why.c_str(), sweepUsage(argv[0]).c_str());
    return 2;
  }
  if (s.opts.help) {
    std::printf("%s", sweepUsage(argv[0]).c_str());
    return 0;
  }
  LaunchInfo launch;
  if (!parseLaunchEnv(processEnv(), &launch, &why)) return fail(nullptr, why);
  if (launch.rank == 0 && !outputsWritable(s.opts, &why)) return fail(nullptr, why);  // only rank 0 writes them

  // Counting GPUs initialises CUDA here; the ranks started below exec a
  // fresh copy of this program, so that is safe.
  std::string backend;  // read as the library reads it
  if (rcn::paramChoice(rcn::ParamId::Backend, &backend) != rcnSuccess)
    return fail(nullptr, "a bad ROCENANTE_BACKEND (the warning above says why)");
  s.gpus = rcn::visibleGpuCount();
  if (backend == "gpu" && s.gpus == 0)
    return fail(nullptr, "ROCENANTE_BACKEND=gpu, but no GPU is visible here (unset it, or =host, for the CPU backend)");
  s.gpu = s.gpus > 0 && backend != "host";
  if (!s.gpu && backend == "auto") setenv("ROCENANTE_BACKEND", "host", 1);
  if (!s.gpu && !s.opts.eager) {
    std::fprintf(stderr, "allreduce_sweep: --mode graph times CUDA graphs: the host backend has none (no GPU "
                         "here, or ROCENANTE_BACKEND=host); use --mode eager\n");
    return 2;
  }
  if (!s.gpu && !s.opts.maxBytesGiven) s.opts.maxBytes = std::max(s.opts.minBytes, kHostDefaultMaxBytes);
  if (!listSweepSizes(s.opts, &s.sizes, &why)) {
    std::fprintf(stderr, "allreduce_sweep: %s\n", why.c_str());
    return 2;
  }
  int nprocs = s.opts.nprocs ? s.opts.nprocs : (s.gpu ? s.gpus : 2);
  if (launch.kind == LaunchKind::Standalone && s.gpu && nprocs > s.gpus)
    return fail(nullptr, "--gpus " + std::to_string(nprocs) + " but only " + std::to_string(s.gpus) +
                             " GPU(s) are visible");
  if (launch.kind == LaunchKind::External && launch.rank == 0 && s.opts.nprocs)
    std::fprintf(stderr, "allreduce_sweep: --gpus %d is ignored: %s started this process, one of its %d ranks\n",
                 s.opts.nprocs, launch.source.c_str(), launch.nranks);
  if (launch.kind == LaunchKind::Standalone && nprocs == 1)
    std::fprintf(stderr, "allreduce_sweep: one rank only: all-reduce is a copy, rocenante's fast path "
                         "needs 2 or more ranks\n");

  if (!s.gpu && launch.kind == LaunchKind::Standalone && !hostRanksFit(s.opts, nprocs, &why))
    return fail(nullptr, why);

  World world;
  if (joinWorld(launch, nprocs, argv, &world, &why) != rcnSuccess) return fail(nullptr, why);
  if (!chooseDevice(&s, world, &why)) return fail(&world, why);
  if (s.sizes.empty()) return fail(&world, "no message sizes between --min-bytes and --max-bytes");
  if (world.rank == 0)
    std::fprintf(stderr, "allreduce_sweep: %d ranks on %d host(s) (%s), %s backend, %zu sizes %s..%s\n",
                 world.nranks, world.nnodes, world.launch.source.c_str(), s.gpu ? "GPU" : "host", s.sizes.size(),
                 formatBytes(s.sizes.front()).c_str(), formatBytes(s.sizes.back()).c_str());

  Pools pools;
  size_t largest = (s.sizes.back() + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  size_t poolBytes = s.gpu ? std::max(s.opts.rotateBytes, largest) : largest;
  if (allocPools(poolBytes, s.gpu, &pools, &why) != rcnSuccess) return fail(&world, why);
  MethodSet methods;
  if (createMethods(s.opts, &world, s.gpu, &pools, &methods, &why) != rcnSuccess) return fail(&world, why);

  SweepResults results;
  results.nranks = world.nranks;
  results.dtype = s.opts.dtype;
  results.op = s.opts.op;
  results.backend = s.gpu ? "gpu" : "host";
  results.methodUnavailable = methods.unavailable;
  addMeta(s, world, methods, argc, argv, &results);

  rcnResult_t res = sweep(s, &world, &pools, &methods, &results, &why);
  destroyMethods(&methods);
  freePools(&pools);
  if (res != rcnSuccess) return fail(&world, why);
  if (world.rank == 0) {
    std::printf("%s", formatTables(results).c_str());
    std::fflush(stdout);
  }
  // A sweep that measured nothing leaves earlier result files as they were.
  const bool measured = anyMeasured(results);
  const bool written = world.rank != 0 || !measured || writeOutputs(s, world, results);
  if (world.bootstrap->barrier() != rcnSuccess) return fail(&world, "final barrier failed");
  if (!world.children.empty() && !reapChildren(&world, 60.0)) return 1;
  if (world.rank == 0 && !measured)
    return fail(&world, std::string("no method measured any size (the '# <method>:' lines above say why)") +
                            (outputsAsked(s.opts) ? "; no file written" : ""));
  return written ? 0 : 1;
}

}  // namespace
}  // namespace rcn::bench

int main(int argc, char** argv) { return rcn::bench::runSweep(argc, argv); }
