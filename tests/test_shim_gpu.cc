// SPDX-License-Identifier: BSD-3-Clause
// The shim on GPUs (1 for the single-rank case, 2 for the rest):
// librocenante.so opened by path the way an application opens libnccl.so.2,
// driven through the plain NCCL API.
// Checks results against a CPU reference on random inputs, eager and in a
// CUDA graph; one thread driving two GPUs inside ncclGroupStart/End;
// ncclCommInitAll; a forced self-test failure making every rank fall back;
// and the fast path across ncclCommSuspend / ncclCommResume.
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"
#include "support/coll_config.h"
#include "support/crash_trace.h"
#include "support/gpu_case.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/reference.h"

namespace {

using rcn::test::installCrashTrace;

// Progress lines, so a crash is placed between two of them.
#define STAGE(...)                          \
  do {                                      \
    fprintf(stderr, "%s: ", rcn::test::crashTraceLabel());    \
    fprintf(stderr, __VA_ARGS__);           \
    fputc('\n', stderr);                    \
  } while (0)

// The NCCL entry points, taken from librocenante.so.
struct Shim {
  decltype(&ncclGetUniqueId) getUniqueId;
  decltype(&ncclCommInitRank) commInitRank;
  decltype(&ncclCommInitAll) commInitAll;
  decltype(&ncclCommDestroy) commDestroy;
  decltype(&ncclCommSplit) commSplit;
  ncclResult_t (*commRevoke)(ncclComm_t, int);  // not in every 2.28 nccl.h
  decltype(&ncclCommAbort) commAbort;
  decltype(&ncclAllReduce) allReduce;
  decltype(&ncclAllGather) allGather;
  decltype(&ncclReduceScatter) reduceScatter;
  decltype(&ncclGroupStart) groupStart;
  decltype(&ncclGroupEnd) groupEnd;
  rcnResult_t (*query)(ncclComm_t, rcnCommInfo*);
  bool ok = false;
};

Shim openShim() {
  Shim s;
  void* lib = dlopen(RCN_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fprintf(stderr, "dlopen: %s\n", dlerror()), s;
#define BIND(field, name) s.field = reinterpret_cast<decltype(s.field)>(dlsym(lib, name))
  BIND(getUniqueId, "ncclGetUniqueId");
  BIND(commInitRank, "ncclCommInitRank");
  BIND(commInitAll, "ncclCommInitAll");
  BIND(commDestroy, "ncclCommDestroy");
  BIND(commSplit, "ncclCommSplit");
  BIND(commRevoke, "ncclCommRevoke");
  BIND(commAbort, "ncclCommAbort");
  BIND(allReduce, "ncclAllReduce");
  BIND(allGather, "ncclAllGather");
  BIND(reduceScatter, "ncclReduceScatter");
  BIND(groupStart, "ncclGroupStart");
  BIND(groupEnd, "ncclGroupEnd");
  BIND(query, "rcnShimCommQuery");
#undef BIND
  s.ok = s.getUniqueId && s.commInitRank && s.commInitAll && s.commDestroy && s.commSplit && s.commRevoke &&
         s.commAbort && s.allReduce && s.allGather && s.reduceScatter && s.groupStart && s.groupEnd && s.query;
  return s;
}

#define EXPECT(cond) RANK_EXPECT(cond)

// Inputs of one rank: random, from a seed every rank can recompute.
std::vector<float> inputOf(int rank, size_t count, unsigned seed) {
  std::mt19937 gen(seed * 131 + rank);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(gen);
  return v;
}

// Compares a result with the double-precision sum of every rank's input.
bool matchesReference(const std::vector<float>& got, int nranks, unsigned seed) {
  size_t count = got.size();
  std::vector<double> want(count, 0.0);
  for (int r = 0; r < nranks; ++r) {
    std::vector<float> in = inputOf(r, count, seed);
    for (size_t i = 0; i < count; ++i) want[i] += in[i];
  }
  for (size_t i = 0; i < count; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 * nranks + 1e-6 * std::fabs(want[i]))) {
      fprintf(stderr, "element %zu of %zu: got %.9g want %.9g\n", i, count, got[i], want[i]);
      return false;
    }
  }
  return true;
}

// Device buffers of one rank for one all-reduce; output poisoned with NaN.
struct Buffers {
  float* send = nullptr;
  float* recv = nullptr;
  size_t count = 0;
  bool fill(int rank, size_t n, unsigned seed) {
    count = n;
    if (cudaMalloc(&send, n * 4) != cudaSuccess || cudaMalloc(&recv, n * 4) != cudaSuccess) return false;
    std::vector<float> in = inputOf(rank, n, seed);
    // The all-reduces run on non-blocking streams, which do not wait for
    // these legacy-stream copies: wait for them here.
    return rcn::test::copyToDevice(send, in.data(), n * 4) == cudaSuccess &&
           cudaMemset(recv, 0xff, n * 4) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  }
  std::vector<float> result() {
    std::vector<float> out(count);
    cudaMemcpy(out.data(), recv, count * 4, cudaMemcpyDeviceToHost);
    return out;
  }
  ~Buffers() {
    cudaFree(send);
    cudaFree(recv);
  }
};

// The unique id travels from rank 0 to the others through shared memory.
struct SharedId {
  volatile int ready;
  ncclUniqueId id;
};

SharedId* makeSharedId() {
  void* p = mmap(nullptr, sizeof(SharedId), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  memset(p, 0, sizeof(SharedId));
  return static_cast<SharedId*>(p);
}

ncclComm_t initRank(const Shim& s, SharedId* shared, int rank, int nranks) {
  if (rank == 0) {
    STAGE("ncclGetUniqueId");
    if (s.getUniqueId(const_cast<ncclUniqueId*>(&shared->id)) != ncclSuccess) return nullptr;
    __sync_synchronize();
    shared->ready = 1;
  }
  for (int i = 0; i < 60000 && !shared->ready; ++i) usleep(1000);
  ncclComm_t comm = nullptr;
  ncclUniqueId id;
  memcpy(&id, const_cast<ncclUniqueId*>(&shared->id), sizeof id);
  STAGE("ncclCommInitRank");
  if (s.commInitRank(&comm, nranks, id, rank) != ncclSuccess) return nullptr;
  STAGE("ncclCommInitRank returned");
  return comm;
}

// One rank of the two-process test: small (rocenante) and large (NCCL)
// all-reduces, eager and captured in a graph.
int twoProcessRank(int rank, SharedId* shared, bool expectFast) {
  installCrashTrace(rank == 0 ? "rank 0" : "rank 1");
  if (cudaSetDevice(rank) != cudaSuccess) return 2;
  STAGE("dlopen librocenante.so");
  Shim s = openShim();
  EXPECT(s.ok);
  ncclComm_t comm = initRank(s, shared, rank, 2);
  EXPECT(comm != nullptr);
  rcnCommInfo info;
  EXPECT(s.query(comm, &info) == rcnSuccess);
  fprintf(stderr, "rank %d: path %d transport %s selftest %d (%.1f us vs %.1f us): %s\n", rank, info.path,
          info.transport, info.selfTestPassed, info.selfTestUsFast, info.selfTestUsNccl, info.reason);
  if (expectFast) EXPECT(info.path != rcnPathNccl);
  else EXPECT(info.path == rcnPathNccl && info.selfTestPassed == 0);

  cudaStream_t stream;
  EXPECT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  unsigned seed = 1;
  for (size_t count : {size_t(1), size_t(1000), size_t(2048), size_t(65536), size_t(4) << 20}) {
    Buffers b;
    EXPECT(b.fill(rank, count, ++seed));
    EXPECT(s.allReduce(b.send, b.recv, count, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    EXPECT(matchesReference(b.result(), 2, seed));
  }
  // Captured in a graph and replayed: each replay must give the same sum.
  Buffers g;
  EXPECT(g.fill(rank, 4096, ++seed));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  for (int i = 0; i < 4; ++i)
    EXPECT(s.allReduce(g.send, g.recv, g.count, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
  EXPECT(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  EXPECT(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    EXPECT(cudaMemsetAsync(g.recv, 0xff, g.count * 4, stream) == cudaSuccess);
    EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    EXPECT(matchesReference(g.result(), 2, seed));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT(s.commDestroy(comm) == ncclSuccess);
  return 0;
}

// One thread drives both GPUs: creation and all-reduces inside groups.
int oneThreadTwoGpus(bool useInitAll) {
  installCrashTrace("one thread");
  STAGE("dlopen librocenante.so");
  Shim s = openShim();
  EXPECT(s.ok);
  ncclComm_t comms[2] = {nullptr, nullptr};
  if (useInitAll) {
    STAGE("ncclCommInitAll");
    EXPECT(s.commInitAll(comms, 2, nullptr) == ncclSuccess);
  } else {
    ncclUniqueId id;
    STAGE("ncclGetUniqueId");
    EXPECT(s.getUniqueId(&id) == ncclSuccess);
    EXPECT(s.groupStart() == ncclSuccess);
    for (int i = 0; i < 2; ++i) {
      EXPECT(cudaSetDevice(i) == cudaSuccess);
      EXPECT(s.commInitRank(&comms[i], 2, id, i) == ncclSuccess);
    }
    STAGE("ncclGroupEnd (the communicators are created here)");
    EXPECT(s.groupEnd() == ncclSuccess);
  }
  STAGE("communicators created");
  for (int i = 0; i < 2; ++i) {
    rcnCommInfo info;
    EXPECT(s.query(comms[i], &info) == rcnSuccess);
    fprintf(stderr, "dev %d: path %d (%s): %s\n", i, info.path, info.transport, info.reason);
    EXPECT(info.path != rcnPathNccl);
  }
  cudaStream_t streams[2];
  Buffers small[2], large[2];
  for (int i = 0; i < 2; ++i) {
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking) == cudaSuccess);
    EXPECT(small[i].fill(i, 3000, 77));
    EXPECT(large[i].fill(i, 4 << 20, 78));
  }
  // Mixed in one group: the small one runs on rocenante, the large on NCCL.
  EXPECT(s.groupStart() == ncclSuccess);
  for (int i = 0; i < 2; ++i) {
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(s.allReduce(large[i].send, large[i].recv, large[i].count, ncclFloat32, ncclSum, comms[i],
                       streams[i]) == ncclSuccess);
    EXPECT(s.allReduce(small[i].send, small[i].recv, small[i].count, ncclFloat32, ncclSum, comms[i],
                       streams[i]) == ncclSuccess);
  }
  EXPECT(s.groupEnd() == ncclSuccess);
  for (int i = 0; i < 2; ++i) {
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(streams[i]) == cudaSuccess);
    EXPECT(matchesReference(small[i].result(), 2, 77));
    EXPECT(matchesReference(large[i].result(), 2, 78));
  }
  for (int i = 0; i < 2; ++i) EXPECT(s.commDestroy(comms[i]) == ncclSuccess);
  return 0;
}

// One all-reduce on each of two communicators (one per GPU), issued from
// this thread inside a group, then checked against the reference.
int allReduceOnBoth(const Shim& s, ncclComm_t (&comms)[2], cudaStream_t (&streams)[2], Buffers (&b)[2],
                    unsigned seed) {
  EXPECT(s.groupStart() == ncclSuccess);
  for (int i = 0; i < 2; ++i)
    EXPECT(s.allReduce(b[i].send, b[i].recv, b[i].count, ncclFloat32, ncclSum, comms[i], streams[i]) ==
           ncclSuccess);
  EXPECT(s.groupEnd() == ncclSuccess);
  for (int i = 0; i < 2; ++i) {
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(streams[i]) == cudaSuccess);
    EXPECT(matchesReference(b[i].result(), 2, seed));
  }
  return 0;
}

// ncclAllGather and ncclReduceScatter through the shim, one thread driving
// both GPUs inside groups: shares below their crossover (rocenante) and
// above it (NCCL), eager and replayed from a graph, every result against
// the reference (the all-gather exactly).
int gatherAndScatter() {
  installCrashTrace("gather/scatter");
  Shim s = openShim();
  EXPECT(s.ok);
  ncclComm_t comms[2] = {nullptr, nullptr};
  EXPECT(s.commInitAll(comms, 2, nullptr) == ncclSuccess);
  cudaStream_t streams[2];
  for (int i = 0; i < 2; ++i) {
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking) == cudaSuccess);
  }
  unsigned seed = 300;
  for (size_t share : {size_t(1000), size_t(300000)}) {  // 8 KB and 2.4 MB in all: both sides of 256 KB
    for (bool graph : {false, true}) {
      ++seed;
      Buffers gather[2], scatter[2];  // gather: send share, recv 2 shares; scatter: send 2 shares, recv 1
      for (int i = 0; i < 2; ++i) {
        EXPECT(cudaSetDevice(i) == cudaSuccess);
        EXPECT(gather[i].fill(i, 2 * share, seed) && scatter[i].fill(i, 2 * share, seed + 1000));
      }
      cudaGraphExec_t execs[2] = {};
      for (int i = 0; i < 2 && graph; ++i) {
        EXPECT(cudaSetDevice(i) == cudaSuccess);
        EXPECT(cudaStreamBeginCapture(streams[i], cudaStreamCaptureModeRelaxed) == cudaSuccess);
      }
      EXPECT(s.groupStart() == ncclSuccess);
      for (int i = 0; i < 2; ++i) {
        EXPECT(cudaSetDevice(i) == cudaSuccess);
        EXPECT(s.allGather(gather[i].send, gather[i].recv, share, ncclFloat32, comms[i], streams[i]) == ncclSuccess);
        EXPECT(s.reduceScatter(scatter[i].send, scatter[i].recv, share, ncclFloat32, ncclSum, comms[i], streams[i]) ==
               ncclSuccess);
      }
      EXPECT(s.groupEnd() == ncclSuccess);
      for (int i = 0; i < 2 && graph; ++i) {
        cudaGraph_t g;
        EXPECT(cudaSetDevice(i) == cudaSuccess);
        EXPECT(cudaStreamEndCapture(streams[i], &g) == cudaSuccess);
        EXPECT(cudaGraphInstantiate(&execs[i], g, 0) == cudaSuccess);
        cudaGraphDestroy(g);
        EXPECT(cudaGraphLaunch(execs[i], streams[i]) == cudaSuccess);
      }
      for (int i = 0; i < 2; ++i) {
        EXPECT(cudaSetDevice(i) == cudaSuccess);
        EXPECT(cudaStreamSynchronize(streams[i]) == cudaSuccess);
        if (execs[i]) cudaGraphExecDestroy(execs[i]);
        // Rank r's share of the gather was the first `share` floats of its send buffer.
        const std::vector<float> got = gather[i].result();
        for (int r = 0; r < 2; ++r) {
          const std::vector<float> in = inputOf(r, 2 * share, seed);
          EXPECT(std::memcmp(got.data() + r * share, in.data(), share * 4) == 0);
        }
        std::vector<float> block = scatter[i].result();
        block.resize(share);
        std::vector<double> want(share, 0.0);
        for (int r = 0; r < 2; ++r) {
          const std::vector<float> in = inputOf(r, 2 * share, seed + 1000);
          for (size_t e = 0; e < share; ++e) want[e] += in[i * share + e];
        }
        for (size_t e = 0; e < share; ++e) EXPECT(std::fabs(block[e] - want[e]) <= 1e-5);
      }
    }
  }
  for (int i = 0; i < 2; ++i) EXPECT(s.commDestroy(comms[i]) == ncclSuccess);
  return 0;
}

// Splits of both communicators inside one group (NCCL fills the new handles
// only at the group's end), then an all-reduce on the children.
int splitInGroup() {
  installCrashTrace("split");
  STAGE("dlopen librocenante.so");
  Shim s = openShim();
  EXPECT(s.ok);
  ncclComm_t parents[2] = {nullptr, nullptr}, children[2] = {nullptr, nullptr};
  STAGE("ncclCommInitAll");
  EXPECT(s.commInitAll(parents, 2, nullptr) == ncclSuccess);
  STAGE("ncclCommSplit in a group");
  EXPECT(s.groupStart() == ncclSuccess);
  for (int i = 0; i < 2; ++i) {
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(s.commSplit(parents[i], 0, i, &children[i], nullptr) == ncclSuccess);
  }
  EXPECT(s.groupEnd() == ncclSuccess);
  Buffers b[2];
  cudaStream_t streams[2];
  for (int i = 0; i < 2; ++i) {
    rcnCommInfo info;
    EXPECT(children[i] != nullptr);
    EXPECT(s.query(children[i], &info) == rcnSuccess);
    fprintf(stderr, "split child %d: path %d (%s): %s\n", i, info.path, info.transport, info.reason);
    EXPECT(info.path != rcnPathNccl);
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking) == cudaSuccess);
    EXPECT(b[i].fill(i, 5000, 91));
  }
  EXPECT(allReduceOnBoth(s, children, streams, b, 91) == 0);
  for (int i = 0; i < 2; ++i) EXPECT(s.commDestroy(children[i]) == ncclSuccess);
  for (int i = 0; i < 2; ++i) EXPECT(s.commDestroy(parents[i]) == ncclSuccess);
  return 0;
}

// One GPU: a single-rank communicator (ncclCommInitRank, then
// ncclCommInitAll) goes through the shim's creation path, the tuner inside
// NCCL and forwarding, but rocenante builds nothing for it (nothing to
// exchange); its all-reduces are NCCL's copies.
int singleRank() {
  installCrashTrace("one rank");
  setenv("ROCENANTE_TUNER", "1", 1);  // the shim names its tuner (off by default), so NCCL loads it
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  STAGE("dlopen librocenante.so");
  Shim s = openShim();
  EXPECT(s.ok);
  SharedId* shared = makeSharedId();
  ncclComm_t comms[2] = {initRank(s, shared, 0, 1), nullptr};
  munmap(shared, sizeof(SharedId));
  EXPECT(comms[0] != nullptr);
  STAGE("ncclCommInitAll");
  int dev0 = 0;
  EXPECT(s.commInitAll(&comms[1], 1, &dev0) == ncclSuccess);
  cudaStream_t stream;
  EXPECT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  for (ncclComm_t comm : comms) {
    rcnCommInfo info;
    EXPECT(s.query(comm, &info) == rcnSuccess);
    fprintf(stderr, "single rank: path %d: %s\n", info.path, info.reason);
    EXPECT(info.path == rcnPathNccl);
    Buffers b;
    EXPECT(b.fill(0, 3000, 55));
    STAGE("ncclAllReduce");
    EXPECT(s.allReduce(b.send, b.recv, b.count, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    EXPECT(matchesReference(b.result(), 1, 55));
    STAGE("ncclCommDestroy");
    EXPECT(s.commDestroy(comm) == ncclSuccess);
  }
  return 0;
}

// A rank whose rocenante setup fails (here: its policy file is missing)
// leaves before its peer's next exchange, and the peer's bootstrap all-gather
// over NCCL never finishes on its GPU. The peer must still give up within
// its timeouts (bootstrap 3 s, abort's wait for the GPU 1 s) and return an
// error, not hang in that wait. The tuner stays off: it would read the
// policy inside NCCL's own init, which would then fail first.
int peerFailsInit(int rank, SharedId* shared) {
  installCrashTrace(rank == 0 ? "rank 0" : "rank 1");
  setenv("ROCENANTE_TUNER", "0", 1);
  setenv("ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "3000", 1);
  setenv("ROCENANTE_TIMEOUT_MS", "1000", 1);
  if (rank == 1) setenv("ROCENANTE_POLICY", "/nonexistent/rocenante-policy.yaml", 1);
  if (cudaSetDevice(rank) != cudaSuccess) return 2;
  STAGE("dlopen librocenante.so");
  Shim s = openShim();
  EXPECT(s.ok);
  const auto start = std::chrono::steady_clock::now();
  ncclComm_t comm = initRank(s, shared, rank, 2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fprintf(stderr, "rank %d: ncclCommInitRank %s after %.1f s\n", rank, comm ? "succeeded" : "failed", seconds);
  EXPECT(comm == nullptr);
  EXPECT(seconds < 30.0);
  return 0;
}

constexpr int kNoRevoke = 77;  // the real NCCL predates ncclCommRevoke

// NCCL fails a revoked communicator's collectives; the shim's small ones,
// which NCCL never sees, must fail too rather than run on the fast path.
int revokeStopsFastPath() {
  installCrashTrace("revoke");
  STAGE("dlopen librocenante.so");
  Shim s = openShim();
  EXPECT(s.ok);
  ncclComm_t comms[2] = {nullptr, nullptr};
  STAGE("ncclCommInitAll");
  EXPECT(s.commInitAll(comms, 2, nullptr) == ncclSuccess);
  // The shim has loaded the real library by now; it may be older than revoke.
  void* real = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (!real || !dlsym(real, "ncclCommRevoke")) return kNoRevoke;
  cudaStream_t streams[2];
  Buffers small[2];
  for (int i = 0; i < 2; ++i) {
    rcnCommInfo info;
    EXPECT(s.query(comms[i], &info) == rcnSuccess);
    EXPECT(info.path != rcnPathNccl);
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking) == cudaSuccess);
    EXPECT(small[i].fill(i, 3000, 79));
  }
  EXPECT(allReduceOnBoth(s, comms, streams, small, 79) == 0);
  STAGE("ncclCommRevoke");
  for (int i = 0; i < 2; ++i) EXPECT(s.commRevoke(comms[i], 0 /* NCCL_REVOKE_DEFAULT */) == ncclSuccess);
  for (int i = 0; i < 2; ++i) {
    EXPECT(cudaSetDevice(i) == cudaSuccess);
    EXPECT(s.allReduce(small[i].send, small[i].recv, small[i].count, ncclFloat32, ncclSum, comms[i], streams[i]) !=
           ncclSuccess);
  }
  STAGE("ncclCommAbort");
  for (int i = 0; i < 2; ++i) EXPECT(s.commAbort(comms[i]) == ncclSuccess);
  for (int i = 0; i < 2; ++i) cudaStreamDestroy(streams[i]);
  return 0;
}

// Where the real NCCL predates ncclCommSuspend (2.28), the test layer
// (tests/nccl_suspend_layer.cc) stands between the shim and it, adding
// suspend and resume. Returns which NCCL provides them, for the log.
const char* provideSuspend() {
  const char* named = getenv("ROCENANTE_NCCL_LIBRARY");
  void* handle = dlopen(named && *named ? named : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!handle || dlsym(handle, "ncclCommSuspend")) return "the real NCCL";
  // The layer opens the real one by its full path: by its soname
  // (libnccl.so.2, the layer's own) it could find itself.
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name || map->l_name[0] != '/')
    return "the real NCCL (its path unknown, so no layer)";
  setenv("RCN_LAYER_REAL_NCCL", map->l_name, 1);
  setenv("ROCENANTE_NCCL_LIBRARY", RCN_SUSPEND_LAYER, 1);
  return "the test layer over an NCCL without them";
}

// One small all-reduce of `count` floats on `comm`, checked.
int smallAllReduce(const Shim& s, ncclComm_t comm, cudaStream_t stream, int rank, unsigned seed) {
  Buffers b;
  EXPECT(b.fill(rank, 3000, seed));
  EXPECT(s.allReduce(b.send, b.recv, b.count, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT(matchesReference(b.result(), 2, seed));
  return 0;
}

// The fast path's state across ncclCommSuspend / ncclCommResume (NCCL 2.29+):
// without NCCL_SUSPEND_MEM it is kept (the query still names it); with the
// flag it is released (the query says suspended, path NCCL) and rebuilt by
// the resume, unless a CUDA graph captured it (then kept, and the graph
// replays right); after each resume all-reduces run on it and are right.
int suspendResumeRank(int rank, SharedId* shared) {
  installCrashTrace(rank == 0 ? "rank 0" : "rank 1");
  if (cudaSetDevice(rank) != cudaSuccess) return 2;
  const char* provider = provideSuspend();
  fprintf(stderr, "rank %d: suspend and resume from %s\n", rank, provider);
  Shim s = openShim();
  EXPECT(s.ok);
  void* lib = dlopen(RCN_SHARED_LIB, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  auto suspend = reinterpret_cast<ncclResult_t (*)(ncclComm_t, int)>(dlsym(lib, "ncclCommSuspend"));
  auto resume = reinterpret_cast<ncclResult_t (*)(ncclComm_t)>(dlsym(lib, "ncclCommResume"));
  EXPECT(suspend && resume);
  ncclComm_t comm = initRank(s, shared, rank, 2);
  EXPECT(comm != nullptr);
  cudaStream_t stream;
  EXPECT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  rcnCommInfo info;
  EXPECT(s.query(comm, &info) == rcnSuccess && info.path != rcnPathNccl);
  const int fastPath = info.path;
  EXPECT(smallAllReduce(s, comm, stream, rank, 91) == 0);

  // ncclAllReduceConfig with a config that asks nothing routes as ncclAllReduce
  // (test_shim_fake_nccl checks the route; here the result on the fast path).
  using AllReduceConfig = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                           cudaStream_t, const rcn::test::CollConfig*);
  auto allReduceConfig = reinterpret_cast<AllReduceConfig>(dlsym(lib, "ncclAllReduceConfig"));
  EXPECT(allReduceConfig != nullptr);
  rcn::test::CollConfig plain;
  Buffers c;
  EXPECT(c.fill(rank, 3000, 95));
  EXPECT(allReduceConfig(c.send, c.recv, c.count, ncclFloat32, ncclSum, comm, stream, &plain) == ncclSuccess);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT(matchesReference(c.result(), 2, 95));

  STAGE("ncclCommSuspend(0): the fast path is kept");
  EXPECT(suspend(comm, 0) == ncclSuccess);
  EXPECT(s.query(comm, &info) == rcnSuccess && info.path == fastPath);
  EXPECT(resume(comm) == ncclSuccess);
  EXPECT(smallAllReduce(s, comm, stream, rank, 92) == 0);

  STAGE("ncclCommSuspend(NCCL_SUSPEND_MEM): the fast path is released");
  size_t freeBefore = 0, freeAfter = 0, total = 0;
  EXPECT(cudaMemGetInfo(&freeBefore, &total) == cudaSuccess);
  EXPECT(suspend(comm, 1 /* NCCL_SUSPEND_MEM */) == ncclSuccess);
  EXPECT(cudaMemGetInfo(&freeAfter, &total) == cudaSuccess);
  EXPECT(s.query(comm, &info) == rcnSuccess && info.path == rcnPathNccl);
  EXPECT(strstr(info.reason, "suspended") != nullptr);
  fprintf(stderr, "rank %d: free GPU memory %zu MiB before the suspend, %zu MiB after\n", rank, freeBefore >> 20,
          freeAfter >> 20);
  STAGE("ncclCommResume: the fast path is rebuilt");
  EXPECT(resume(comm) == ncclSuccess);
  EXPECT(s.query(comm, &info) == rcnSuccess && info.path == fastPath);
  EXPECT(smallAllReduce(s, comm, stream, rank, 93) == 0);

  // Once a graph holds a fast-path kernel, NCCL_SUSPEND_MEM keeps our memory
  // (the graph holds its addresses): the graph replays right after resume.
  Buffers g;
  EXPECT(g.fill(rank, 2048, 94));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  EXPECT(s.allReduce(g.send, g.recv, g.count, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
  EXPECT(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  EXPECT(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  STAGE("ncclCommSuspend(NCCL_SUSPEND_MEM) after a capture: the fast path is kept");
  EXPECT(suspend(comm, 1) == ncclSuccess);
  EXPECT(s.query(comm, &info) == rcnSuccess && info.path == fastPath);
  EXPECT(resume(comm) == ncclSuccess);
  EXPECT(cudaMemsetAsync(g.recv, 0xff, g.count * 4, stream) == cudaSuccess);
  EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT(matchesReference(g.result(), 2, 94));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT(s.commDestroy(comm) == ncclSuccess);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace

TEST_CASE("one GPU: single-rank communicators through the shim forward to NCCL") {
  rcn::test::requireGpus(1);
  rcn::test::checkInOneRank([] { return singleRank(); });
}

TEST_CASE("two processes through the shim: small on rocenante, large on NCCL, eager and graph") {
  rcn::test::requireOwnGpus(2);  // NCCL: one GPU per rank
  SharedId* shared = makeSharedId();
  rcn::test::checkRanks(rcn::test::runRanks(2, [&](int rank) { return twoProcessRank(rank, shared, true); }));
  munmap(shared, sizeof(SharedId));
}

TEST_CASE("a forced self-test failure on one rank makes every rank fall back") {
  rcn::test::requireOwnGpus(2);  // NCCL: one GPU per rank
  SharedId* shared = makeSharedId();
  rcn::test::checkRanks(rcn::test::runRanks(2, [&](int rank) {
    setenv("ROCENANTE_SELFTEST_FAIL_RANK", "1", 1);
    return twoProcessRank(rank, shared, false);
  }));
  munmap(shared, sizeof(SharedId));
}

TEST_CASE("a rank whose setup fails leaves its peer an error, not a hang") {
  rcn::test::requireOwnGpus(2);  // NCCL: one GPU per rank
  SharedId* shared = makeSharedId();
  rcn::test::checkRanks(rcn::test::runRanks(2, [&](int rank) { return peerFailsInit(rank, shared); }));
  munmap(shared, sizeof(SharedId));
}

TEST_CASE("one thread, two GPUs: ncclCommInitRank and all-reduces inside groups") {
  rcn::test::requireOwnGpus(2);  // NCCL: one GPU per rank
  rcn::test::checkInOneRank([] { return oneThreadTwoGpus(false); });
}

TEST_CASE("one thread, two GPUs: ncclAllGather and ncclReduceScatter in groups and graphs") {
  rcn::test::requireOwnGpus(2);
  rcn::test::checkInOneRank([] { return gatherAndScatter(); });
}

TEST_CASE("one thread, two GPUs: ncclCommInitAll") {
  rcn::test::requireOwnGpus(2);  // NCCL: one GPU per rank
  rcn::test::checkInOneRank([] { return oneThreadTwoGpus(true); });
}

TEST_CASE("one thread, two GPUs: ncclCommSplit inside a group") {
  rcn::test::requireOwnGpus(2);  // NCCL: one GPU per rank
  rcn::test::checkInOneRank([] { return splitInGroup(); });
}

TEST_CASE("one thread, two GPUs: after ncclCommRevoke small all-reduces fail too") {
  rcn::test::requireOwnGpus(2);  // NCCL: one GPU per rank
  auto outcomes = rcn::test::runRanks(1, [](int) { return revokeStopsFastPath(); });
  if (outcomes.size() == 1 && outcomes[0].exitCode == kNoRevoke) SKIP("the real NCCL has no ncclCommRevoke");
  rcn::test::checkRanks(outcomes);
}

TEST_CASE("two processes: suspend keeps or releases the fast path, resume brings it back") {
  rcn::test::requireOwnGpus(2);
  SharedId* shared = makeSharedId();
  rcn::test::checkRanks(rcn::test::runRanks(2, [&](int rank) { return suspendResumeRank(rank, shared); }));
  munmap(shared, sizeof(SharedId));
}
