// SPDX-License-Identifier: BSD-3-Clause
#include "core/nccl_lib.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/params.h"
#include "core/strings.h"

namespace rcn {
namespace {

struct Loaded {
  void* handle = nullptr;
  std::string path;
  NcclApi api{};
  rcnResult_t result = rcnSystemError;
};

// Our own file, so we never forward to ourselves when we are installed as
// libnccl.so.2 or preloaded.
std::string ownPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ownPath), &info) && info.dli_fname) {
    char resolved[PATH_MAX];
    if (realpath(info.dli_fname, resolved)) return resolved;
  }
  return "";
}

std::string realPathOf(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) ? std::string(resolved) : path;
}

// A handle is rocenante's own when it exports our API.
bool isRocenante(void* handle) { return dlsym(handle, "rcnGetVersion") != nullptr; }

// The candidates that were not used: those that do not exist, and the
// others with why (the loader's reason, or "rocenante itself").
struct Tried {
  std::vector<std::string> absent;
  std::vector<std::string> refused;
};

// Opens path unless it is rocenante itself; `tried` learns why not.
void* openIfReal(const std::string& path, const std::string& self, Tried* tried) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = dlerror();
    std::string why = error ? error : "cannot be loaded";
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // the loader repeats the path
    if (why.find("No such file") != std::string::npos) tried->absent.push_back(path);
    else tried->refused.push_back(path + ": " + why);
    return nullptr;
  }
  if (isRocenante(handle) || (!self.empty() && realPathOf(path) == self)) {
    tried->refused.push_back(path + ": rocenante itself, not NCCL");
    dlclose(handle);
    return nullptr;
  }
  return handle;
}

// One line each, the headline last (it becomes the last error): a list of
// every path in one line would outgrow a log line.
void warnNotFound(const Tried& tried) {
  for (const std::string& line : tried.refused) RCN_WARN(RCN_LOG_INIT, "not NCCL: %s", line.c_str());
  std::string absent;
  for (const std::string& path : tried.absent) absent += (absent.empty() ? "" : ", ") + path;
  if (!absent.empty()) RCN_WARN(RCN_LOG_INIT, "no such file: %s", absent.c_str());
  RCN_WARN(RCN_LOG_INIT, "no real NCCL library found (%zu not NCCL, %zu absent: the lines above); set "
           "ROCENANTE_NCCL_LIBRARY to the path of libnccl.so.2", tried.refused.size(), tried.absent.size());
}

std::vector<std::string> searchDirs() {
  std::vector<std::string> dirs;
  if (const char* env = getenv("LD_LIBRARY_PATH")) dirs = splitNonEmpty(env, ':');
  for (const char* d : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                        "/usr/lib", "/usr/local/lib", "/usr/local/cuda/lib64",
                        "/usr/local/cuda/targets/x86_64-linux/lib",
                        "/usr/local/cuda/targets/sbsa-linux/lib"})
    dirs.push_back(d);
  return dirs;
}

void* findRealNccl(std::string* path, Tried* tried) {
  std::string self = ownPath();
  std::string forced = paramStr(ParamId::NcclLibrary);
  if (!forced.empty()) {
    void* handle = openIfReal(forced, self, tried);
    if (handle) *path = forced;
    return handle;
  }
  void* handle = openIfReal("libnccl.so.2", self, tried);
  if (handle) {
    *path = "libnccl.so.2";
    return handle;
  }
  for (const std::string& dir : searchDirs()) {
    std::string candidate = dir + "/libnccl.so.2";
    handle = openIfReal(candidate, self, tried);
    if (handle) {
      *path = candidate;
      return handle;
    }
  }
  return nullptr;
}

template <typename Fn>
bool bind(void* handle, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (!*slot) *missing += std::string(" ") + name;
  return *slot != nullptr;
}

void load(Loaded* loaded) {
  Tried tried;
  loaded->handle = findRealNccl(&loaded->path, &tried);
  if (!loaded->handle) {
    warnNotFound(tried);
    return;
  }
  void* h = loaded->handle;
  NcclApi& a = loaded->api;
  std::string missing;
  bind(h, "ncclGetVersion", &a.getVersion, &missing);
  bind(h, "ncclGetUniqueId", &a.getUniqueId, &missing);
  bind(h, "ncclCommInitRank", &a.commInitRank, &missing);
  bind(h, "ncclCommInitAll", &a.commInitAll, &missing);
  bind(h, "ncclCommDestroy", &a.commDestroy, &missing);
  bind(h, "ncclCommAbort", &a.commAbort, &missing);
  bind(h, "ncclCommGetAsyncError", &a.commGetAsyncError, &missing);
  bind(h, "ncclAllReduce", &a.allReduce, &missing);
  bind(h, "ncclAllGather", &a.allGather, &missing);
  bind(h, "ncclReduceScatter", &a.reduceScatter, &missing);
  bind(h, "ncclGroupStart", &a.groupStart, &missing);
  bind(h, "ncclGroupEnd", &a.groupEnd, &missing);
  bind(h, "ncclGetErrorString", &a.getErrorString, &missing);
  if (!missing.empty()) {
    RCN_WARN(RCN_LOG_INIT, "%s lacks entry points:%s", loaded->path.c_str(), missing.c_str());
    return;
  }
  int version = 0;
  a.getVersion(&version);
  RCN_INFO(RCN_LOG_INIT, "forwarding to NCCL %d from %s", version, loaded->path.c_str());
  loaded->result = rcnSuccess;
}

Loaded& loadedOnce() {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] { load(&loaded); });
  return loaded;
}

}  // namespace

rcnResult_t ncclApi(const NcclApi** api) {
  Loaded& loaded = loadedOnce();
  if (loaded.result != rcnSuccess) return loaded.result;
  *api = &loaded.api;
  return rcnSuccess;
}

void* ncclLibraryHandle() { return loadedOnce().handle; }

const char* ncclLibraryPath() { return loadedOnce().path.c_str(); }

}  // namespace rcn
