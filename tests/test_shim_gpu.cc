// The shim on GPUs (1 for the single-rank case, 2 for the rest):
// librocenante.so opened by path the way an application opens libnccl.so.2,
// driven through the plain NCCL API.
// Checks results against a CPU reference on random inputs, eager and in a
// CUDA graph; one thread driving two GPUs inside ncclGroupStart/End;
// ncclCommInitAll; and a forced self-test failure making every rank fall back.
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
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
#include "support/crash_trace.h"
#include "support/gpu_case.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"

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
  BIND(groupStart, "ncclGroupStart");
  BIND(groupEnd, "ncclGroupEnd");
  BIND(query, "rcnShimCommQuery");
#undef BIND
  s.ok = s.getUniqueId && s.commInitRank && s.commInitAll && s.commDestroy && s.commSplit && s.commRevoke &&
         s.commAbort && s.allReduce && s.groupStart && s.groupEnd && s.query;
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
    return cudaMemcpy(send, in.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
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
