// SPDX-License-Identifier: BSD-3-Clause
// A stand-in for libnccl.so.2 with no GPU behind it, for CPU tests of the
// shim (test_shim_fake_nccl). It does what the real NCCL (2.30+) does with the
// parts the shim touches: communicators that know their rank, size and device;
// the tuner plugin loaded from NCCL_TUNER_PLUGIN with dlopen(RTLD_NOW |
// RTLD_LOCAL), its v6 table looked up first, else v5's; init called with a
// logger, the NVLink-domain info and the constants block, getCollInfo called with a [7][3] cost table on every
// collective, finalize on destroy and the plugin dlclosed with the last
// communicator. Collectives move no data. fakeNcclStats() reports what happened.
// FAKE_NCCL_WITHOUT_ASYNC_ERROR builds an NCCL older than the shim's table:
// without ncclCommGetAsyncError and without NCCL 2.29+'s entry points
// (suspend, resume, grow, the per-call-config collectives).
#include <dlfcn.h>
#include <nccl.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "support/fake_nccl_stats.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kAlgos = 7, kProtos = 3;  // NCCL 2.28's cost table

typedef void (*Logger)(int, unsigned long, const char*, int, const char*, ...);
struct NvlInfo {
  int nNvlDomains, minRanks, maxRanks;
};
// v6's table (NCCL 2.30+, which looks it up before v5's): v5's plus getChunkSize.
struct TunerV6 {
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, size_t, size_t, Logger, NvlInfo*, void*);
  ncclResult_t (*getCollInfo)(void*, int, size_t, int, float**, int, int, int, int*);
  ncclResult_t (*finalize)(void*);
  ncclResult_t (*getChunkSize)(void*, int, size_t, int, int, int, size_t*);  // absent from v5's
};

}  // namespace

// What the shim did to this NCCL (support/fake_nccl_stats.h).

namespace {

FakeNcclStats stats;
std::mutex mutex;  // guards stats and the plugin state, as NCCL's own mutex does
void* tunerLib = nullptr;
TunerV6* tuner = nullptr;  // a v5 table is read only up to its finalize
int tunerUsers = 0;
int groupDepth = 0;

struct FakeComm {
  int nranks, rank, dev;
  void* tunerContext;
  bool usesTuner;
  bool revoked;  // NCCL fails a revoked communicator's collectives
};

// NCCL's log function, as passed to the tuner's init: keeps the last line.
void logger(int, unsigned long, const char*, int, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(stats.tunerLogLine, sizeof stats.tunerLogLine, fmt, ap);
  va_end(ap);
  ++stats.tunerLogLines;
}

// NCCL loads the plugin once per process and shares it between communicators.
void loadTuner(FakeComm* comm) {
  const char* name = getenv("NCCL_TUNER_PLUGIN");
  if (!name || !*name || strcmp(name, "none") == 0) return;
  if (!tuner) {
    tunerLib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!tunerLib) return;
    tuner = static_cast<TunerV6*>(dlsym(tunerLib, "ncclTunerPlugin_v6"));
    stats.tunerVersion = 6;
    if (!tuner) {
      tuner = static_cast<TunerV6*>(dlsym(tunerLib, "ncclTunerPlugin_v5"));
      stats.tunerVersion = 5;
    }
    if (!tuner) {
      dlclose(tunerLib);
      tunerLib = nullptr;
      return;
    }
    ++stats.tunerLoads;
    snprintf(stats.tunerPath, sizeof stats.tunerPath, "%s", name);
  }
  ++tunerUsers;
  comm->usesTuner = true;
  static double constants[4096];  // larger than NCCL's constants block
  NvlInfo nvl{1, comm->nranks, comm->nranks};
  if (tuner->init(&comm->tunerContext, 0x1234abcdull, comm->nranks, 1, logger, &nvl, constants) == ncclSuccess)
    ++stats.tunerInits;
}

void unloadTuner(FakeComm* comm) {
  if (!comm->usesTuner) return;
  tuner->finalize(comm->tunerContext);
  ++stats.tunerFinalizes;
  if (--tunerUsers == 0) {
    dlclose(tunerLib);
    tunerLib = nullptr;
    tuner = nullptr;
    ++stats.tunerUnloads;
  }
}

ncclResult_t create(ncclComm_t* out, int nranks, int rank, int dev) {
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto* comm = new FakeComm{nranks, rank, dev, nullptr, false, false};
  std::lock_guard<std::mutex> lock(mutex);
  loadTuner(comm);
  ++stats.commsCreated;
  *out = reinterpret_cast<ncclComm_t>(comm);
  return ncclSuccess;
}

ncclResult_t release(ncclComm_t handle, int* counter) {
  if (!handle) return ncclInvalidArgument;
  auto* comm = reinterpret_cast<FakeComm*>(handle);
  std::lock_guard<std::mutex> lock(mutex);
  unloadTuner(comm);
  ++*counter;
  delete comm;
  return ncclSuccess;
}

// Every collective asks the tuner, as NCCL's enqueue does.
ncclResult_t collective(ncclComm_t handle, int func, size_t bytes, int* counter) {
  if (!handle) return ncclInvalidArgument;
  auto* comm = reinterpret_cast<FakeComm*>(handle);
  std::lock_guard<std::mutex> lock(mutex);
  if (comm->revoked) return ncclInvalidUsage;
  ++*counter;
  if (comm->usesTuner) {
    float table[kAlgos][kProtos];
    for (int a = 0; a < kAlgos; ++a)
      for (int p = 0; p < kProtos; ++p) table[a][p] = a >= 2 ? -1.0f : 10.0f + a + p;
    int channels = 0;
    tuner->getCollInfo(comm->tunerContext, func, bytes, 1, reinterpret_cast<float**>(table), kAlgos, kProtos, 0,
                       &channels);
    ++stats.getCollInfoCalls;
  }
  return ncclSuccess;
}

}  // namespace

FAKE_EXPORT const FakeNcclStats* fakeNcclStats() { return &stats; }

FAKE_EXPORT ncclResult_t ncclGetVersion(int* version) {
  *version = 22803;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0x5a, sizeof *id);
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  return create(comm, nranks, rank, rank);
}

FAKE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank,
                                                ncclConfig_t*) {
  return create(comm, nranks, rank, rank);
}

FAKE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  for (int i = 0; i < ndev; ++i) {
    ncclResult_t r = create(&comms[i], ndev, i, devlist ? devlist[i] : i);
    if (r != ncclSuccess) return r;
  }
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) { return release(comm, &stats.commsDestroyed); }
FAKE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { return release(comm, &stats.commsAborted); }
FAKE_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
FAKE_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int) {
  if (!comm) return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(mutex);
  reinterpret_cast<FakeComm*>(comm)->revoked = true;
  ++stats.revokes;
  return ncclSuccess;
}

#ifndef FAKE_NCCL_WITHOUT_ASYNC_ERROR  // the build that plays an older NCCL
FAKE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* error) {
  *error = ncclSuccess;
  return ncclSuccess;
}
#endif

FAKE_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = reinterpret_cast<FakeComm*>(comm)->nranks;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = reinterpret_cast<FakeComm*>(comm)->rank;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* dev) {
  *dev = reinterpret_cast<FakeComm*>(comm)->dev;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclAllReduce(const void*, void*, size_t count, ncclDataType_t, ncclRedOp_t,
                                       ncclComm_t comm, cudaStream_t) {
  return collective(comm, /*ncclFuncAllReduce*/ 4, count * 4, &stats.allReduces);
}

FAKE_EXPORT ncclResult_t ncclAllGather(const void*, void*, size_t count, ncclDataType_t, ncclComm_t comm,
                                       cudaStream_t) {
  return collective(comm, /*ncclFuncAllGather*/ 2, count, &stats.allGathers);
}

FAKE_EXPORT ncclResult_t ncclReduceScatter(const void*, void*, size_t count, ncclDataType_t, ncclRedOp_t,
                                           ncclComm_t comm, cudaStream_t) {
  return collective(comm, /*ncclFuncReduceScatter*/ 3, count * 4, &stats.reduceScatters);
}

#ifndef FAKE_NCCL_WITHOUT_ASYNC_ERROR
// The per-call config is only passed on (NCCL 2.31+ names its type).
#ifdef NCCL_COLLCONFIG_INITIALIZER
typedef const ncclCollConfig_t* FakeCollConfig;
#else
typedef const void* FakeCollConfig;
#endif

FAKE_EXPORT ncclResult_t ncclAllReduceConfig(const void*, void*, size_t count, ncclDataType_t, ncclRedOp_t,
                                             ncclComm_t comm, cudaStream_t, FakeCollConfig) {
  return collective(comm, 4, count * 4, &stats.allReduceConfigs);
}

FAKE_EXPORT ncclResult_t ncclAllGatherConfig(const void*, void*, size_t count, ncclDataType_t, ncclComm_t comm,
                                             cudaStream_t, FakeCollConfig) {
  return collective(comm, 2, count, &stats.allGatherConfigs);
}

FAKE_EXPORT ncclResult_t ncclReduceScatterConfig(const void*, void*, size_t count, ncclDataType_t, ncclRedOp_t,
                                                 ncclComm_t comm, cudaStream_t, FakeCollConfig) {
  return collective(comm, 3, count * 4, &stats.reduceScatterConfigs);
}

FAKE_EXPORT ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
  if (!comm) return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(mutex);
  ++stats.suspends;
  stats.lastSuspendFlags = flags;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommResume(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(mutex);
  ++stats.resumes;
  return ncclSuccess;
}

// A grown communicator: nRanks ranks, this one at `rank` (a joining rank) or
// at the parent's rank.
FAKE_EXPORT ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId*, int rank, ncclComm_t* newcomm,
                                      ncclConfig_t*) {
  int myRank = comm ? reinterpret_cast<FakeComm*>(comm)->rank : rank;
  ncclResult_t r = create(newcomm, nRanks, myRank, myRank);
  if (r == ncclSuccess) ++stats.grows;
  return r;
}
#endif

FAKE_EXPORT ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupEnd() {
  if (groupDepth == 0) return ncclInvalidUsage;
  --groupDepth;
  return ncclSuccess;
}

FAKE_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "no error" : "fake NCCL error";
}

// NCCL's last-error text: process-wide, never cleared; the tests set it.
static std::string lastErrorText;
FAKE_EXPORT const char* ncclGetLastError(ncclComm_t) { return lastErrorText.c_str(); }
FAKE_EXPORT void fakeNcclSetLastError(const char* text) { lastErrorText = text; }
