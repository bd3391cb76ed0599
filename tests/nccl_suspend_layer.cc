// SPDX-License-Identifier: BSD-3-Clause
// A libnccl.so.2 for GPU tests of the shim's suspend and resume where the
// installed NCCL predates them (2.28): it forwards the calls the shim and
// its tests make to the real NCCL (RCN_LAYER_REAL_NCCL, opened on first use)
// and adds ncclCommSuspend / ncclCommResume, which, as NCCL's do, make the
// communicator refuse collectives between them (ncclInvalidUsage) and
// otherwise leave it alone. What the test checks is rocenante's side:
// its fast path kept or released at suspend, working again after resume.
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#define LAYER_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

void* realLibrary() {
  static void* handle = [] {
    const char* path = getenv("RCN_LAYER_REAL_NCCL");
    void* h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!h) fprintf(stderr, "nccl_suspend_layer: cannot open RCN_LAYER_REAL_NCCL=%s\n", path ? path : "(unset)");
    return h;
  }();
  return handle;
}

// The real entry point `name`, typed as `Fn`; aborts the test where missing.
template <typename Fn>
Fn real(const char* name) {
  void* h = realLibrary();
  void* fn = h ? dlsym(h, name) : nullptr;
  if (!fn) {
    fprintf(stderr, "nccl_suspend_layer: the real NCCL lacks %s\n", name);
    abort();
  }
  return reinterpret_cast<Fn>(fn);
}

#define REAL(name) real<decltype(&name)>(#name)

std::mutex mutex;
std::set<ncclComm_t> suspended;

bool isSuspended(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mutex);
  return suspended.count(comm) != 0;
}

}  // namespace

LAYER_EXPORT ncclResult_t ncclCommSuspend(ncclComm_t comm, int) {
  std::lock_guard<std::mutex> lock(mutex);
  return suspended.insert(comm).second ? ncclSuccess : ncclInvalidUsage;
}

LAYER_EXPORT ncclResult_t ncclCommResume(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mutex);
  return suspended.erase(comm) ? ncclSuccess : ncclInvalidUsage;
}

LAYER_EXPORT ncclResult_t ncclGetVersion(int* v) { return REAL(ncclGetVersion)(v); }
LAYER_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { return REAL(ncclGetUniqueId)(id); }
LAYER_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* c, int n, ncclUniqueId id, int r) {
  return REAL(ncclCommInitRank)(c, n, id, r);
}
LAYER_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* c, int n, const int* devs) {
  return REAL(ncclCommInitAll)(c, n, devs);
}
LAYER_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) { return REAL(ncclCommDestroy)(c); }
LAYER_EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) { return REAL(ncclCommAbort)(c); }
LAYER_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* e) {
  return REAL(ncclCommGetAsyncError)(c, e);
}
LAYER_EXPORT ncclResult_t ncclCommCount(const ncclComm_t c, int* n) { return REAL(ncclCommCount)(c, n); }
LAYER_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t c, int* d) { return REAL(ncclCommCuDevice)(c, d); }
LAYER_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t c, int* r) { return REAL(ncclCommUserRank)(c, r); }
LAYER_EXPORT ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                        ncclComm_t c, cudaStream_t st) {
  if (isSuspended(c)) return ncclInvalidUsage;
  return REAL(ncclAllReduce)(s, r, n, t, op, c, st);
}
LAYER_EXPORT ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c,
                                        cudaStream_t st) {
  if (isSuspended(c)) return ncclInvalidUsage;
  return REAL(ncclAllGather)(s, r, n, t, c, st);
}
LAYER_EXPORT ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                            ncclComm_t c, cudaStream_t st) {
  if (isSuspended(c)) return ncclInvalidUsage;
  return REAL(ncclReduceScatter)(s, r, n, t, op, c, st);
}
LAYER_EXPORT ncclResult_t ncclGroupStart() { return REAL(ncclGroupStart)(); }
LAYER_EXPORT ncclResult_t ncclGroupEnd() { return REAL(ncclGroupEnd)(); }
LAYER_EXPORT const char* ncclGetErrorString(ncclResult_t r) { return REAL(ncclGetErrorString)(r); }
LAYER_EXPORT const char* ncclGetLastError(ncclComm_t c) { return REAL(ncclGetLastError)(c); }
