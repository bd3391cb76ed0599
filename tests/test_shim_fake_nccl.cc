// SPDX-License-Identifier: BSD-3-Clause
// The shim's interception and the tuner's life inside NCCL, on a CPU: the
// shim forwards to tests/fake_nccl.cc (a libnccl.so.2 without a GPU, named by
// ROCENANTE_NCCL_LIBRARY), which loads librocenante.so as its tuner plugin
// the way NCCL 2.28 does (dlopen of NCCL_TUNER_PLUGIN, v5 init, getCollInfo
// per collective, finalize and dlclose with the last communicator).
// Communicators of one rank need no GPU; two-rank ones fail rocenante's setup
// (no GPU, or, on a GPU host, a bootstrap over a fake ncclAllGather that moves
// nothing), which exercises the failure and abort paths. Each case runs in a fresh
// process so that the environment it sets is the one the library reads.
#include <catch2/catch_test_macros.hpp>

#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "rocenante/rocenante.h"
#include "support/coll_config.h"
#include "support/fake_nccl_stats.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"

namespace {

using rcn::test::CollConfig;

// NCCL 2.29+ entry points, typed here (the build's nccl.h may lack them).
struct NewerApi {
  ncclResult_t (*allReduceConfig)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t,
                                  const CollConfig*);
  ncclResult_t (*pAllReduceConfig)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t,
                                   const CollConfig*);
  ncclResult_t (*allGatherConfig)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t,
                                  const CollConfig*);
  ncclResult_t (*reduceScatterConfig)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t,
                                      const CollConfig*);
  ncclResult_t (*suspend)(ncclComm_t, int);
  ncclResult_t (*resume)(ncclComm_t);
  ncclResult_t (*grow)(ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*, ncclConfig_t*);
};

// The shim's NCCL 2.29+ entry points (every one must be exported).
bool bindNewer(NewerApi* api) {
  void* lib = dlopen(RCN_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
#define BIND(field, name) api->field = reinterpret_cast<decltype(api->field)>(dlsym(lib, name))
  BIND(allReduceConfig, "ncclAllReduceConfig");
  BIND(pAllReduceConfig, "pncclAllReduceConfig");
  BIND(allGatherConfig, "ncclAllGatherConfig");
  BIND(reduceScatterConfig, "ncclReduceScatterConfig");
  BIND(suspend, "ncclCommSuspend");
  BIND(resume, "ncclCommResume");
  BIND(grow, "ncclCommGrow");
#undef BIND
  return api->allReduceConfig && api->pAllReduceConfig && api->allGatherConfig && api->reduceScatterConfig &&
         api->suspend && api->resume && api->grow;
}

struct Shim {
  decltype(&ncclGetUniqueId) getUniqueId;
  decltype(&ncclCommInitRank) commInitRank;
  decltype(&ncclCommInitAll) commInitAll;
  decltype(&ncclCommDestroy) commDestroy;
  decltype(&ncclCommAbort) commAbort;
  decltype(&ncclAllReduce) allReduce;
  decltype(&ncclAllGather) allGather;
  decltype(&ncclReduceScatter) reduceScatter;
  decltype(&ncclGetLastError) getLastError;
  decltype(&rcnAllReduce) rcnAllReduceFn;  // rocenante's own API, from the same library
  ncclResult_t (*commRevoke)(ncclComm_t, int);  // not in every 2.28 nccl.h
  decltype(&ncclGroupStart) groupStart;
  decltype(&ncclGroupEnd) groupEnd;
  rcnResult_t (*query)(ncclComm_t, rcnCommInfo*);
  const FakeNcclStats* stats;
  void (*setNcclLastError)(const char*);  // the fake's own
};

#define EXPECT(cond) RANK_EXPECT(cond)

// Opens the shim the way an application opens libnccl.so.2, after setting
// the environment; the fake NCCL is then the library the shim opened.
bool openShim(Shim* s) {
  setenv("ROCENANTE_NCCL_LIBRARY", RCN_FAKE_NCCL, 1);
  unsetenv("NCCL_TUNER_PLUGIN");
  void* lib = dlopen(RCN_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fprintf(stderr, "dlopen %s: %s\n", RCN_SHARED_LIB, dlerror()), false;
#define BIND(field, name) s->field = reinterpret_cast<decltype(s->field)>(dlsym(lib, name))
  BIND(getUniqueId, "ncclGetUniqueId");
  BIND(commInitRank, "ncclCommInitRank");
  BIND(commInitAll, "ncclCommInitAll");
  BIND(commDestroy, "ncclCommDestroy");
  BIND(commAbort, "ncclCommAbort");
  BIND(allReduce, "ncclAllReduce");
  BIND(allGather, "ncclAllGather");
  BIND(reduceScatter, "ncclReduceScatter");
  BIND(getLastError, "ncclGetLastError");
  BIND(rcnAllReduceFn, "rcnAllReduce");
  BIND(commRevoke, "ncclCommRevoke");
  BIND(groupStart, "ncclGroupStart");
  BIND(groupEnd, "ncclGroupEnd");
  BIND(query, "rcnShimCommQuery");
#undef BIND
  // The shim opens the fake lazily, at the first forwarded call.
  int version = 0;
  auto getVersion = reinterpret_cast<decltype(&ncclGetVersion)>(dlsym(lib, "ncclGetVersion"));
  if (!getVersion || getVersion(&version) != ncclSuccess || version != 22803)
    return fprintf(stderr, "the shim did not forward ncclGetVersion to the fake NCCL\n"), false;
  void* fake = dlopen(RCN_FAKE_NCCL, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  auto statsFn = fake ? reinterpret_cast<const FakeNcclStats* (*)()>(dlsym(fake, "fakeNcclStats")) : nullptr;
  s->stats = statsFn ? statsFn() : nullptr;
  s->setNcclLastError = fake ? reinterpret_cast<void (*)(const char*)>(dlsym(fake, "fakeNcclSetLastError")) : nullptr;
  return s->getUniqueId && s->commInitRank && s->commInitAll && s->commDestroy && s->commAbort && s->allReduce &&
         s->allGather && s->reduceScatter && s->getLastError && s->commRevoke && s->groupStart && s->groupEnd &&
         s->query && s->stats && s->setNcclLastError;
}

// Runs body in a child process and checks it exited 0.
void inChild(const std::function<int()>& body) {
  rcn::test::checkRanks(rcn::test::runRanks(1, [&](int) { return body(); }, 60.0));
}

// A single-rank communicator through the shim: ncclCommInitRank's result
// (ncclSystemError where even the unique id failed).
ncclResult_t initSingle(const Shim& s, ncclComm_t* comm) {
  ncclUniqueId id;
  if (s.getUniqueId(&id) != ncclSuccess) return ncclSystemError;
  return s.commInitRank(comm, 1, id, 0);
}

// Runs body in a child process with the shim opened, its warnings off (the
// failures these cases cause on purpose would only be noise).
void inQuietShim(const std::function<int(Shim&)>& body) {
  inChild([&] {
    setenv("ROCENANTE_DEBUG", "NONE", 1);
    Shim s;
    EXPECT(openShim(&s));
    return body(s);
  });
}

// inQuietShim with NCCL 2.29+'s entry points bound and a single-rank
// communicator made for body, destroyed after it.
void withSingleComm(const std::function<int(Shim&, const NewerApi&, ncclComm_t)>& body) {
  inQuietShim([&](Shim& s) {
    NewerApi api;
    EXPECT(bindNewer(&api));
    ncclComm_t comm = nullptr;
    EXPECT(initSingle(s, &comm) == ncclSuccess);
    EXPECT(body(s, api, comm) == 0);
    EXPECT(s.commDestroy(comm) == ncclSuccess);
    return 0;
  });
}

float host[2][64];  // collectives move nothing in the fake; any non-null pointer does

// Opens a group and makes the two ranks of one communicator in it with
// ncclCommInitRank, as an nccl-tests style program driving 2 GPUs does.
int initTwoInGroup(const Shim& s, ncclComm_t (&comms)[2]) {
  ncclUniqueId id;
  EXPECT(s.getUniqueId(&id) == ncclSuccess);
  EXPECT(s.groupStart() == ncclSuccess);
  for (int i = 0; i < 2; ++i) EXPECT(s.commInitRank(&comms[i], 2, id, i) == ncclSuccess);
  return 0;
}

}  // namespace

TEST_CASE("one-rank communicators: NCCL loads the shim's tuner (ROCENANTE_TUNER=1), calls forward, the plugin is unloaded and reloaded") {
  inChild([] {
    setenv("ROCENANTE_TUNER", "1", 1);
    Shim s;
    EXPECT(openShim(&s));
    for (int round = 0; round < 2; ++round) {
      ncclUniqueId id;
      EXPECT(s.getUniqueId(&id) == ncclSuccess);
      ncclComm_t comm = nullptr;
      EXPECT(s.commInitRank(&comm, 1, id, 0) == ncclSuccess);
      EXPECT(comm != nullptr);
      rcnCommInfo info;
      EXPECT(s.query(comm, &info) == rcnSuccess);
      EXPECT(info.path == rcnPathNccl);
      EXPECT(strstr(info.reason, "single-rank") != nullptr);
      EXPECT(s.allReduce(host[0], host[1], 64, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
      EXPECT(s.commDestroy(comm) == ncclSuccess);
    }
    const FakeNcclStats& st = *s.stats;
    EXPECT(strstr(st.tunerPath, "librocenante") != nullptr);  // set by the shim before NCCL's init
    EXPECT(st.commsCreated == 2 && st.commsDestroyed == 2);
    EXPECT(st.tunerLoads == 2 && st.tunerUnloads == 2);  // NCCL dlcloses it with the last comm
    EXPECT(st.tunerInits == 2 && st.tunerFinalizes == 2);
    EXPECT(st.allReduces == 2 && st.getCollInfoCalls == 2);
    // NCCL took the newest table and the tuner wrote through NCCL's log function.
    EXPECT(st.tunerVersion == 6);
    EXPECT(st.tunerLogLines >= 2 && strstr(st.tunerLogLine, "rocenante tuner:") != nullptr);
    return 0;
  });
}

TEST_CASE("by default the shim names no tuner: NCCL_TUNER_PLUGIN stays unset and NCCL loads none") {
  inChild([] {
    unsetenv("NCCL_TUNER_PLUGIN");
    Shim s;
    EXPECT(openShim(&s));
    ncclComm_t comm = nullptr;
    EXPECT(initSingle(s, &comm) == ncclSuccess);
    EXPECT(getenv("NCCL_TUNER_PLUGIN") == nullptr);
    EXPECT(s.allReduce(host[0], host[1], 64, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    EXPECT(s.commDestroy(comm) == ncclSuccess);
    EXPECT(s.stats->tunerLoads == 0 && s.stats->tunerPath[0] == 0);
    return 0;
  });
}

TEST_CASE("ncclCommInitAll whose rocenante setup fails: both aborted, an error, no crash") {
  inChild([] {
    setenv("ROCENANTE_DEBUG", "NONE", 1);  // the setup failure is expected; its WARN is noise here
    setenv("ROCENANTE_TUNER", "1", 1);     // and the tuner NCCL loaded is released
    Shim s;
    EXPECT(openShim(&s));
    ncclComm_t comms[2] = {nullptr, nullptr};
    EXPECT(s.commInitAll(comms, 2, nullptr) != ncclSuccess);
    EXPECT(comms[0] == nullptr && comms[1] == nullptr);
    const FakeNcclStats& st = *s.stats;
    EXPECT(st.commsCreated == 2 && st.commsAborted == 2);
    EXPECT(st.tunerInits == 2 && st.tunerFinalizes == 2 && st.tunerUnloads == 1);
    return 0;
  });
}

TEST_CASE("two ncclCommInitRank in a group on one thread: set up at ncclGroupEnd, destroyable after a failure") {
  inQuietShim([](Shim& s) {
    setenv("ROCENANTE_TUNER", "1", 1);  // read at the first creation: the tuner is released too
    ncclComm_t comms[2] = {nullptr, nullptr};
    EXPECT(initTwoInGroup(s, comms) == 0);
    EXPECT(s.groupEnd() != ncclSuccess);  // rocenante's setup fails over the fake
    for (int i = 0; i < 2; ++i) {
      rcnCommInfo info;
      EXPECT(s.query(comms[i], &info) == rcnSuccess);
      EXPECT(info.path == rcnPathNccl);
      EXPECT(s.allReduce(host[0], host[1], 64, ncclFloat32, ncclSum, comms[i], nullptr) == ncclSuccess);
    }
    for (int i = 0; i < 2; ++i) EXPECT(s.commDestroy(comms[i]) == ncclSuccess);
    const FakeNcclStats& st = *s.stats;
    EXPECT(st.commsDestroyed == 2 && st.tunerFinalizes == 2 && st.tunerUnloads == 1);
    return 0;
  });
}

TEST_CASE("ncclCommInitAll in a group is set up at ncclGroupEnd, as NCCL makes the comms there") {
  inQuietShim([](Shim& s) {
    ncclComm_t comms[2] = {nullptr, nullptr};
    EXPECT(s.groupStart() == ncclSuccess);
    EXPECT(s.commInitAll(comms, 2, nullptr) == ncclSuccess);  // no setup yet: it would fail over the fake
    EXPECT(comms[0] != nullptr && comms[1] != nullptr);
    EXPECT(s.groupEnd() != ncclSuccess);  // the setup, failing over the fake, at the group's end
    for (int i = 0; i < 2; ++i) EXPECT(s.commDestroy(comms[i]) == ncclSuccess);
    EXPECT(s.stats->commsDestroyed == 2);
    return 0;
  });
}

TEST_CASE("communicators destroyed or aborted inside their group are not set up at its end") {
  inQuietShim([](Shim& s) {
    ncclComm_t comms[2] = {nullptr, nullptr};
    EXPECT(initTwoInGroup(s, comms) == 0);
    EXPECT(s.commDestroy(comms[0]) == ncclSuccess);
    EXPECT(s.commAbort(comms[1]) == ncclSuccess);
    EXPECT(s.groupEnd() == ncclSuccess);  // nothing left to set up
    EXPECT(s.stats->commsDestroyed == 1 && s.stats->commsAborted == 1);
    for (ncclComm_t gone : comms) {  // the freed handles were never read nor registered
      rcnCommInfo info;
      EXPECT(s.query(gone, &info) != rcnSuccess);
    }
    return 0;
  });
}

TEST_CASE("ncclGetLastError's pointer stays valid when a later warning replaces the text") {
  inQuietShim([](Shim& s) {
    EXPECT(s.rcnAllReduceFn != nullptr);
    // A short warning first, then a far longer one: storage sized for the
    // first would have to grow, and the first pointer would dangle.
    EXPECT(s.rcnAllReduceFn(host[0], host[1], 1, rcnFloat32, rcnSum, nullptr, nullptr) != rcnSuccess);
    const char* first = s.getLastError(nullptr);
    EXPECT(std::strstr(first, "comm is NULL") != nullptr);
    ncclComm_t comms[2] = {nullptr, nullptr};
    EXPECT(s.commInitAll(comms, 2, nullptr) != ncclSuccess);
    EXPECT(s.getLastError(nullptr) == first);  // one buffer, rewritten, never freed
    EXPECT(std::strstr(first, "ncclCommInitAll") != nullptr);
    return 0;
  });
}

// NCCL's text is process-wide and never cleared: once NCCL has warned, a
// later failure of ours must still be what ncclGetLastError says, until NCCL
// warns again.
TEST_CASE("ncclGetLastError gives whichever failure came last, ours or NCCL's") {
  inQuietShim([](Shim& s) {
    s.setNcclLastError("NCCL: an old failure");
    EXPECT(std::strcmp(s.getLastError(nullptr), "NCCL: an old failure") == 0);
    ncclComm_t comms[2] = {nullptr, nullptr};
    EXPECT(s.commInitAll(comms, 2, nullptr) != ncclSuccess);  // ours: the setup fails over the fake
    EXPECT(std::strstr(s.getLastError(nullptr), "ncclCommInitAll") != nullptr);
    s.setNcclLastError("NCCL: a newer failure");
    EXPECT(std::strcmp(s.getLastError(nullptr), "NCCL: a newer failure") == 0);
    return 0;
  });
}

// The build of the fake that plays an NCCL older than the shim's table: no
// ncclCommGetAsyncError, none of NCCL 2.29+'s entry points. The rest forward;
// a config asking nothing still runs as the plain call; anything that needs
// an entry point it lacks fails with ncclInvalidUsage and names it.
TEST_CASE("a real NCCL lacking entry points forwards the others; the missing ones fail by name") {
  inChild([] {
    setenv("ROCENANTE_DEBUG", "NONE", 1);
    setenv("ROCENANTE_NCCL_LIBRARY", RCN_FAKE_NCCL_OLD, 1);
    void* lib = dlopen(RCN_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
    EXPECT(lib != nullptr);
    auto getVersion = reinterpret_cast<decltype(&ncclGetVersion)>(dlsym(lib, "ncclGetVersion"));
    auto asyncError = reinterpret_cast<decltype(&ncclCommGetAsyncError)>(dlsym(lib, "ncclCommGetAsyncError"));
    auto getUniqueId = reinterpret_cast<decltype(&ncclGetUniqueId)>(dlsym(lib, "ncclGetUniqueId"));
    auto initRank = reinterpret_cast<decltype(&ncclCommInitRank)>(dlsym(lib, "ncclCommInitRank"));
    auto getLastError = reinterpret_cast<decltype(&ncclGetLastError)>(dlsym(lib, "ncclGetLastError"));
    NewerApi api;
    EXPECT(getVersion && asyncError && getUniqueId && initRank && getLastError && bindNewer(&api));
    int version = 0;
    EXPECT(getVersion(&version) == ncclSuccess && version == 22803);
    ncclResult_t async = ncclSuccess;
    EXPECT(asyncError(nullptr, &async) == ncclInvalidUsage);  // the one it lacks

    ncclUniqueId id;
    ncclComm_t comm = nullptr;
    EXPECT(getUniqueId(&id) == ncclSuccess && initRank(&comm, 1, id, 0) == ncclSuccess);
    CollConfig plain, withCtas;
    withCtas.minCTAs = 2;
    EXPECT(api.allReduceConfig(host[0], host[1], 8, ncclFloat32, ncclSum, comm, nullptr, &plain) == ncclSuccess);
    EXPECT(api.allReduceConfig(host[0], host[1], 8, ncclFloat32, ncclSum, comm, nullptr, &withCtas) ==
           ncclInvalidUsage);
    EXPECT(strstr(getLastError(nullptr), "ncclAllReduceConfig") != nullptr);
    EXPECT(api.suspend(comm, 1) == ncclInvalidUsage);
    EXPECT(strstr(getLastError(nullptr), "ncclCommSuspend") != nullptr);
    EXPECT(api.resume(comm) == ncclInvalidUsage);
    return 0;
  });
}

TEST_CASE("a malformed ROCENANTE_* variable fails even a single-rank creation, aborting it") {
  inQuietShim([](Shim& s) {
    setenv("ROCENANTE_TIMEOUT_MS", "abc", 1);  // parameters are read at each use
    ncclComm_t comm = nullptr;
    EXPECT(initSingle(s, &comm) == ncclInvalidArgument);
    EXPECT(comm == nullptr && s.stats->commsAborted == 1);
    EXPECT(std::strstr(s.getLastError(nullptr), "ROCENANTE_TIMEOUT_MS") != nullptr);
    return 0;
  });
}

TEST_CASE("without a real NCCL, ncclGetErrorString still names the codes") {
  inChild([] {
    setenv("ROCENANTE_DEBUG", "NONE", 1);
    setenv("ROCENANTE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    void* lib = dlopen(RCN_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
    EXPECT(lib != nullptr);
    auto errorString = reinterpret_cast<decltype(&ncclGetErrorString)>(dlsym(lib, "ncclGetErrorString"));
    EXPECT(errorString != nullptr);
    EXPECT(std::strcmp(errorString(ncclSuccess), "no error") == 0);
    EXPECT(std::strstr(errorString(ncclInvalidUsage), "invalid usage") != nullptr);
    return 0;
  });
}

// The shim intercepts both (shim_ncclAllGather, shim_ncclReduceScatter); a
// communicator it built no state for, and a call it must not route (a
// user-made op), reach NCCL unchanged, once each.
TEST_CASE("ncclAllGather and ncclReduceScatter forward to NCCL where rocenante does not take them") {
  inQuietShim([](Shim& s) {
    ncclComm_t comm = nullptr;
    EXPECT(initSingle(s, &comm) == ncclSuccess);
    const FakeNcclStats& st = *s.stats;
    const int gathers = st.allGathers, scatters = st.reduceScatters;
    EXPECT(s.allGather(host[0], host[1], 16, ncclFloat32, comm, nullptr) == ncclSuccess);
    EXPECT(s.reduceScatter(host[0], host[1], 16, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    EXPECT(s.reduceScatter(host[0], host[1], 16, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps), comm, nullptr) ==
           ncclSuccess);
    EXPECT(st.allGathers == gathers + 1 && st.reduceScatters == scatters + 2);
    EXPECT(s.commDestroy(comm) == ncclSuccess);
    return 0;
  });
}

TEST_CASE("ROCENANTE_DISABLE=1: pure forwarding, no tuner, no setup") {
  inChild([] {
    setenv("ROCENANTE_DISABLE", "1", 1);
    setenv("ROCENANTE_TUNER", "1", 1);  // asked for, and still not loaded: DISABLE wins
    Shim s;
    EXPECT(openShim(&s));
    ncclComm_t comms[2] = {nullptr, nullptr};
    EXPECT(s.commInitAll(comms, 2, nullptr) == ncclSuccess);
    for (int i = 0; i < 2; ++i) {
      rcnCommInfo info;
      EXPECT(s.query(comms[i], &info) == rcnSuccess);
      EXPECT(strstr(info.reason, "ROCENANTE_DISABLE") != nullptr);
      EXPECT(s.allReduce(host[0], host[1], 64, ncclFloat32, ncclSum, comms[i], nullptr) == ncclSuccess);
    }
    for (int i = 0; i < 2; ++i) EXPECT(s.commDestroy(comms[i]) == ncclSuccess);
    const FakeNcclStats& st = *s.stats;
    EXPECT(st.tunerLoads == 0 && st.allReduces == 2 && st.commsDestroyed == 2);
    return 0;
  });
}

// The shim passes ncclCommRevoke on (and the fake, like NCCL, then fails the
// communicator's collectives); its own fast path stopping too is
// test_shim_gpu's to check, since here no communicator has one.
TEST_CASE("ncclCommRevoke reaches NCCL: later all-reduces fail, destroy still frees the communicator") {
  inChild([] {
    Shim s;
    EXPECT(openShim(&s));
    ncclComm_t comm = nullptr;
    EXPECT(initSingle(s, &comm) == ncclSuccess);
    EXPECT(s.allReduce(host[0], host[1], 64, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    EXPECT(s.commRevoke(comm, 0) == ncclSuccess);
    EXPECT(s.allReduce(host[0], host[1], 64, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess);
    EXPECT(s.commDestroy(comm) == ncclSuccess);
    const FakeNcclStats& st = *s.stats;
    EXPECT(st.revokes == 1 && st.allReduces == 1 && st.commsDestroyed == 1);
    return 0;
  });
}

// A config that asks nothing is the plain call (NCCL's own definition), so it
// routes as the plain twin does: there a small all-reduce may take the fast
// path. Anything set is NCCL's to honour. On a single-rank communicator both
// routes end in the fake, which counts which entry point was reached.
TEST_CASE("per-call-config collectives route as their plain twins unless the config asks something") {
  withSingleComm([](Shim& s, const NewerApi& api, ncclComm_t comm) {
    const FakeNcclStats& st = *s.stats;
    auto allReduce = [&](const CollConfig* config) {
      return api.allReduceConfig(host[0], host[1], 64, ncclFloat32, ncclSum, comm, nullptr, config);
    };
    CollConfig plain, withCtas, withEvent, badMagic, olderSize;
    withCtas.maxCTAs = 4;
    withEvent.launchCompletionEvent = &withEvent;                  // any non-null event: only NCCL records it
    badMagic.magic = 0;                                            // uninitialized: NCCL reports it
    olderSize.size = offsetof(CollConfig, launchCompletionEvent);  // NCCL 2.31's struct
    olderSize.launchCompletionEvent = &olderSize;                  // past its size: not read
    EXPECT(allReduce(nullptr) == ncclSuccess && st.allReduces == 1 && st.allReduceConfigs == 0);
    EXPECT(allReduce(&plain) == ncclSuccess && st.allReduces == 2 && st.allReduceConfigs == 0);
    EXPECT(allReduce(&olderSize) == ncclSuccess && st.allReduces == 3 && st.allReduceConfigs == 0);
    EXPECT(allReduce(&withCtas) == ncclSuccess && st.allReduceConfigs == 1);
    EXPECT(allReduce(&withEvent) == ncclSuccess && st.allReduceConfigs == 2);
    EXPECT(allReduce(&badMagic) == ncclSuccess && st.allReduceConfigs == 3 && st.allReduces == 3);
    EXPECT(api.pAllReduceConfig(host[0], host[1], 64, ncclFloat32, ncclSum, comm, nullptr, &plain) == ncclSuccess);
    EXPECT(st.allReduces == 4);

    CollConfig ring;
    ring.algSelection = "ring";
    EXPECT(api.allGatherConfig(host[0], host[1], 16, ncclFloat32, comm, nullptr, &plain) == ncclSuccess);
    EXPECT(st.allGathers == 1 && st.allGatherConfigs == 0);
    EXPECT(api.allGatherConfig(host[0], host[1], 16, ncclFloat32, comm, nullptr, &ring) == ncclSuccess);
    EXPECT(st.allGathers == 1 && st.allGatherConfigs == 1);

    CollConfig tagged;
    tagged.userProfilerTag = 7;
    EXPECT(api.reduceScatterConfig(host[0], host[1], 16, ncclFloat32, ncclSum, comm, nullptr, nullptr) == ncclSuccess);
    EXPECT(st.reduceScatters == 1 && st.reduceScatterConfigs == 0);
    EXPECT(api.reduceScatterConfig(host[0], host[1], 16, ncclFloat32, ncclSum, comm, nullptr, &tagged) == ncclSuccess);
    EXPECT(st.reduceScatters == 1 && st.reduceScatterConfigs == 1);
    return 0;
  });
}

TEST_CASE("ncclCommSuspend and ncclCommResume reach NCCL; the communicator works after resume") {
  withSingleComm([](Shim& s, const NewerApi& api, ncclComm_t comm) {
    const FakeNcclStats& st = *s.stats;
    for (int flags : {0, 1 /* NCCL_SUSPEND_MEM */}) {
      EXPECT(api.suspend(comm, flags) == ncclSuccess);
      EXPECT(st.lastSuspendFlags == flags);
      EXPECT(api.resume(comm) == ncclSuccess);
      rcnCommInfo info;
      EXPECT(s.query(comm, &info) == rcnSuccess);
      EXPECT(strstr(info.reason, "single-rank") != nullptr);  // no state of ours to release or rebuild
      EXPECT(s.allReduce(host[0], host[1], 64, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    }
    EXPECT(st.suspends == 2 && st.resumes == 2 && st.allReduces == 2);
    EXPECT(api.suspend(nullptr, 0) == ncclInvalidArgument);  // NCCL's answer, passed on
    return 0;
  });
}

// ncclCommGrow makes a communicator as creation does: a single-rank one gets
// no state; a two-rank one whose setup fails here (no GPU, a fake all-gather)
// is aborted and the error returned, as after ncclCommInitRank.
TEST_CASE("ncclCommGrow: the grown communicator is set up as a created one") {
  withSingleComm([](Shim& s, const NewerApi& api, ncclComm_t comm) {
    ncclComm_t grown = nullptr;
    EXPECT(api.grow(comm, 1, nullptr, -1, &grown, nullptr) == ncclSuccess);
    rcnCommInfo info;
    EXPECT(grown != nullptr && s.query(grown, &info) == rcnSuccess);
    EXPECT(strstr(info.reason, "single-rank") != nullptr);
    EXPECT(s.commDestroy(grown) == ncclSuccess);
    ncclComm_t wider = nullptr;
    EXPECT(api.grow(comm, 2, nullptr, -1, &wider, nullptr) != ncclSuccess);
    EXPECT(wider == nullptr && s.stats->grows == 2 && s.stats->commsAborted == 1);
    return 0;
  });
}
