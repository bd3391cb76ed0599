// SPDX-License-Identifier: BSD-3-Clause
// collectives_sweep: times rcnAllGather and rcnReduceScatter (rocenante
// forced onto its fast path) against NCCL's own on the same ranks and
// buffers, in one run, inside CUDA graphs and eagerly, and prints one table
// per collective. Sizes are whole buffers (nranks x a rank's share), as
// nccl-tests counts them. Before timing, each size's result is compared
// with NCCL's bit for bit (small integer inputs, so every summation order
// agrees). Without a GPU it times the host backend alone (eager).
//
//   collectives_sweep [--gpus N] [--min-bytes 1K] [--max-bytes 512K] [--dtype bf16|f16|f32]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/launch_env.h"
#include "core/params.h"
#include "support/reference.h"
#include "sweep_options.h"
#include "sweep_world.h"

namespace rcn::bench {
namespace {

constexpr int kCallsPerGraph = 20;  // calls captured in one graph
constexpr int kReplays = 15;        // timed replays (or eager batches); the median is reported
constexpr const char* kCollectives[] = {"all-gather", "reduce-scatter"};

struct Options {
  int nprocs = 0;
  size_t minBytes = 1024, maxBytes = 512 * 1024;
  rcnDataType_t dtype = rcnBfloat16;
};

bool parseArgs(int argc, char** argv, Options* o, std::string* why) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return *why = a + " needs a value", false;
    const std::string v = argv[++i];
    int64_t n = 0;
    if (a == "--dtype") {
      if (v == "bf16") o->dtype = rcnBfloat16;
      else if (v == "f16") o->dtype = rcnFloat16;
      else if (v == "f32") o->dtype = rcnFloat32;
      else return *why = "--dtype " + v + ": expected bf16, f16 or f32", false;
    } else if (!parseIntText(v, &n, why) || n <= 0) {
      return *why = a + " " + v + ": " + (why->empty() ? "must be positive" : *why), false;
    } else if (a == "--gpus") {
      o->nprocs = static_cast<int>(n);
    } else if (a == "--min-bytes") {
      o->minBytes = static_cast<size_t>(n);
    } else if (a == "--max-bytes") {
      o->maxBytes = static_cast<size_t>(n);
    } else {
      return *why = "unknown option " + a, false;
    }
  }
  return true;
}

// One rank's communicators, buffers and stream.
struct Rank {
  World* world = nullptr;
  bool gpu = false;
  rcnComm_t rcn = nullptr;
  ncclComm_t nccl = nullptr;
  void *send = nullptr, *recv = nullptr, *check = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

// One call of `coll` through rocenante (nccl false) or NCCL; share in elements.
bool call(Rank& r, int coll, bool nccl, size_t share, rcnDataType_t t, void* out) {
  if (nccl) {
    const ncclDataType_t nt = static_cast<ncclDataType_t>(t);
    return (coll == 0 ? ncclAllGather(r.send, out, share, nt, r.nccl, r.stream)
                      : ncclReduceScatter(r.send, out, share, nt, ncclSum, r.nccl, r.stream)) == ncclSuccess;
  }
  return (coll == 0 ? rcnAllGather(r.send, out, share, t, r.rcn, r.stream)
                    : rcnReduceScatter(r.send, out, share, t, rcnSum, r.rcn, r.stream)) == rcnSuccess;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds per call: kReplays timed batches of kCallsPerGraph calls,
// replayed from one captured graph (graph) or launched one by one.
double timeCalls(Rank& r, int coll, bool nccl, size_t share, rcnDataType_t t, bool graph) {
  const auto batch = [&] {
    for (int i = 0; i < kCallsPerGraph; ++i)
      if (!call(r, coll, nccl, share, t, r.recv)) return false;
    return true;
  };
  if (!r.gpu) {  // the host backend returns with the result: wall time
    std::vector<double> us;
    for (int k = 0; k < kReplays; ++k) {
      const auto begin = std::chrono::steady_clock::now();
      if (!batch()) return -1;
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count() /
                   kCallsPerGraph);
    }
    return median(us);
  }
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    if (cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
    const bool ok = batch();
    if (cudaStreamEndCapture(r.stream, &g) != cudaSuccess || !ok) return -1;
    const bool made = cudaGraphInstantiate(&exec, g, 0) == cudaSuccess;
    cudaGraphDestroy(g);
    if (!made) return -1;
  }
  const auto once = [&] { return graph ? cudaGraphLaunch(exec, r.stream) == cudaSuccess : batch(); };
  bool ok = once() && cudaStreamSynchronize(r.stream) == cudaSuccess;  // warm-up
  std::vector<double> us;
  for (int k = 0; ok && k < kReplays; ++k) {
    float ms = 0;
    ok = cudaEventRecord(r.start, r.stream) == cudaSuccess && once() &&
         cudaEventRecord(r.stop, r.stream) == cudaSuccess && cudaEventSynchronize(r.stop) == cudaSuccess &&
         cudaEventElapsedTime(&ms, r.start, r.stop) == cudaSuccess;
    us.push_back(1000.0 * ms / kCallsPerGraph);
  }
  if (exec) cudaGraphExecDestroy(exec);
  return ok ? median(us) : -1;
}

bool copyIn(Rank& r, void* dst, const void* src, size_t bytes) {
  if (!r.gpu) return std::memcpy(dst, src, bytes), true;
  return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}

bool copyOut(Rank& r, void* dst, const void* src, size_t bytes) {
  if (!r.gpu) return std::memcpy(dst, src, bytes), true;
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

// rocenante's result against NCCL's (or, on the host backend, the float64
// reference of the small integer inputs), bit for bit. "" when they agree.
std::string checkPoint(Rank& r, int coll, size_t share, rcnDataType_t t) {
  const int n = r.world->nranks;
  const size_t sendCount = coll == 0 ? share : share * n, outCount = coll == 0 ? share * n : share;
  const size_t elem = dtypeSize(t);
  std::vector<uint8_t> in(sendCount * elem), got(outCount * elem), want(outCount * elem);
  for (size_t i = 0; i < sendCount; ++i) test::storeElement(in.data(), i, t, double((r.world->rank + 1) * (i % 7 + 1)));
  if (!copyIn(r, r.send, in.data(), in.size())) return "copy in failed";
  if (!call(r, coll, false, share, t, r.recv)) return std::string("rocenante: ") + rcnGetLastError(r.rcn);
  if (r.gpu && cudaStreamSynchronize(r.stream) != cudaSuccess) return "rocenante's call failed on the GPU";
  if (!copyOut(r, got.data(), r.recv, got.size())) return "copy out failed";
  for (size_t i = 0; i < outCount; ++i) {  // what both must give: the inputs, or their sums
    const size_t j = coll == 0 ? i % share : size_t(r.world->rank) * share + i;
    const double v = coll == 0 ? double((i / share + 1) * (j % 7 + 1)) : double(n * (n + 1) / 2 * (j % 7 + 1));
    test::storeElement(want.data(), i, t, v);
  }
  if (std::memcmp(got.data(), want.data(), got.size()) != 0) return "rocenante's result is wrong";
  if (!r.nccl) return "";
  if (!call(r, coll, true, share, t, r.check) || cudaStreamSynchronize(r.stream) != cudaSuccess ||
      !copyOut(r, want.data(), r.check, want.size()))
    return "NCCL's call failed";
  return std::memcmp(got.data(), want.data(), got.size()) == 0 ? "" : "rocenante's result differs from NCCL's";
}

struct PointTimes {
  double us[2][2];  // [rocenante, nccl][graph, eager]; -1: not measured
  char error[120];
};

// One collective over every size: checked, timed, gathered; rank 0 prints.
bool sweepCollective(Rank& r, int coll, const Options& o, size_t maxShareBytes) {
  const int n = r.world->nranks;
  const size_t elem = dtypeSize(o.dtype);
  if (r.world->rank == 0)
    std::printf(
        "\n# %s, %d ranks, %s%s, us per call (median of %d batches of %d), the slowest rank's\n"
        "%10s %12s %12s %8s %12s %12s %8s\n",
        kCollectives[coll], n, dtypeName(o.dtype), coll == 1 ? " sum" : "", kReplays, kCallsPerGraph, "bytes",
        "rcn graph", "nccl graph", "speedup", "rcn eager", "nccl eager", "speedup");
  bool allOk = true;
  for (size_t whole = o.minBytes; whole <= o.maxBytes; whole *= 2) {
    const size_t share = whole / n / elem;
    if (share == 0 || share * elem > maxShareBytes) continue;  // not one rank's share the fast path can hold
    PointTimes mine{};
    std::string error = checkPoint(r, coll, share, o.dtype);
    for (int path = 0; path < 2; ++path)
      for (int mode = 0; mode < 2; ++mode) {
        const bool skip = !error.empty() || (path == 1 && !r.nccl) || (mode == 0 && !r.gpu);
        mine.us[path][mode] = skip ? -1 : timeCalls(r, coll, path == 1, share, o.dtype, mode == 0);
      }
    std::snprintf(mine.error, sizeof mine.error, "%s", error.c_str());
    std::vector<PointTimes> all;
    if (gatherAll(r.world->bootstrap.get(), mine, &all) != rcnSuccess) return false;
    if (r.world->rank != 0) continue;
    PointTimes worst = all[0];
    for (const PointTimes& p : all) {
      for (int path = 0; path < 2; ++path)
        for (int mode = 0; mode < 2; ++mode)
          worst.us[path][mode] =
              p.us[path][mode] < 0 || worst.us[path][mode] < 0 ? -1 : std::max(worst.us[path][mode], p.us[path][mode]);
      if (p.error[0] && !worst.error[0]) std::memcpy(worst.error, p.error, sizeof worst.error);
    }
    const auto cell = [](double us) {
      char text[24];
      std::snprintf(text, sizeof text, us < 0 ? "n/a" : "%.2f", us);
      return std::string(text);
    };
    const auto ratio = [](double ours, double theirs) {  // how many times faster rocenante is
      char text[24];
      std::snprintf(text, sizeof text, ours <= 0 || theirs <= 0 ? "-" : "%.2fx", theirs / ours);
      return std::string(text);
    };
    std::printf("%10s %12s %12s %8s %12s %12s %8s%s%s\n", formatBytes(share * elem * n).c_str(),
                cell(worst.us[0][0]).c_str(), cell(worst.us[1][0]).c_str(),
                ratio(worst.us[0][0], worst.us[1][0]).c_str(), cell(worst.us[0][1]).c_str(),
                cell(worst.us[1][1]).c_str(), ratio(worst.us[0][1], worst.us[1][1]).c_str(),
                worst.error[0] ? "  ERROR: " : "", worst.error);
    allOk = allOk && !worst.error[0];
  }
  std::fflush(stdout);
  return allOk;
}

// The ranks' communicators: rocenante forced onto its fast path, and NCCL
// (on GPUs). Rank 0 makes the ids and shares them over the world's bootstrap.
std::string createComms(Rank& r) {
  struct Ids {
    rcnUniqueId rcn;
    ncclUniqueId nccl;
  } ids{};
  if (r.world->rank == 0 &&
      (rcnGetUniqueId(&ids.rcn) != rcnSuccess || (r.gpu && ncclGetUniqueId(&ids.nccl) != ncclSuccess)))
    return "cannot make the unique ids";
  std::vector<Ids> all;
  if (gatherAll(r.world->bootstrap.get(), ids, &all) != rcnSuccess) return "cannot share the unique ids";
  setenv("ROCENANTE_FORCE", "rocenante", 1);
  setenv("ROCENANTE_NATIVE_NCCL", "0", 1);  // NCCL is timed on a communicator of its own
  if (rcnCommInitRank(&r.rcn, r.world->nranks, all[0].rcn, r.world->rank) != rcnSuccess)
    return std::string("rcnCommInitRank: ") + rcnGetLastError(nullptr);
  if (r.gpu && ncclCommInitRank(&r.nccl, r.world->nranks, all[0].nccl, r.world->rank) != ncclSuccess)
    return "ncclCommInitRank failed";
  return "";
}

std::string allocate(Rank& r, size_t bytes) {
  if (!r.gpu) {
    r.send = std::malloc(bytes), r.recv = std::malloc(bytes), r.check = std::malloc(bytes);
    return r.send && r.recv && r.check ? "" : "out of host memory";
  }
  const bool ok = cudaMalloc(&r.send, bytes) == cudaSuccess && cudaMalloc(&r.recv, bytes) == cudaSuccess &&
                  cudaMalloc(&r.check, bytes) == cudaSuccess &&
                  cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking) == cudaSuccess &&
                  cudaEventCreate(&r.start) == cudaSuccess && cudaEventCreate(&r.stop) == cudaSuccess;
  return ok ? "" : "CUDA allocation failed";
}

int run(int argc, char** argv) {
  Options o;
  std::string why;
  if (!parseArgs(argc, argv, &o, &why)) {
    std::fprintf(stderr,
                 "collectives_sweep: %s\nusage: %s [--gpus N] [--min-bytes B] [--max-bytes B] "
                 "[--dtype bf16|f16|f32]\n",
                 why.c_str(), argv[0]);
    return 2;
  }
  LaunchInfo launch;
  if (!parseLaunchEnv(processEnv(), &launch, &why))
    return std::fprintf(stderr, "collectives_sweep: %s\n", why.c_str()), 1;
  const int gpus = visibleGpuCount();
  std::string backend;
  if (paramChoice(ParamId::Backend, &backend) != rcnSuccess) return 1;
  Rank r;
  r.gpu = gpus > 0 && backend != "host";
  if (!r.gpu) setenv("ROCENANTE_BACKEND", "host", 1);
  const int nprocs = o.nprocs ? o.nprocs : (r.gpu ? gpus : 2);
  World world;
  if (joinWorld(launch, nprocs, argv, &world, &why) != rcnSuccess)
    return std::fprintf(stderr, "collectives_sweep: %s\n", why.c_str()), 1;
  r.world = &world;
  if (r.gpu && cudaSetDevice(gpus == 1 ? 0 : world.localRank % gpus) != cudaSuccess) why = "cudaSetDevice failed";
  if (why.empty()) why = allocate(r, o.maxBytes * 2);
  if (why.empty()) why = createComms(r);
  bool ok = why.empty();
  if (!ok) std::fprintf(stderr, "collectives_sweep rank %d: %s\n", world.rank, why.c_str());
  // A rank's share stops at the p2p path's LL lines (the host backend chunks any size).
  const size_t maxShare = r.gpu ? static_cast<size_t>(paramInt(ParamId::LlMaxBytes)) : o.maxBytes;
  for (int coll = 0; ok && coll < 2; ++coll) ok = sweepCollective(r, coll, o, maxShare) && ok;
  if (r.rcn) rcnCommDestroy(r.rcn);
  if (r.nccl) ncclCommDestroy(r.nccl);
  const bool synced = world.bootstrap->barrier() == rcnSuccess;
  if (!world.children.empty() && !reapChildren(&world, 60.0)) return 1;
  return ok && synced ? 0 : 1;
}

}  // namespace
}  // namespace rcn::bench

int main(int argc, char** argv) { return rcn::bench::run(argc, argv); }
