#include "core/nccl_lib.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/params.h"

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

// Opens path unless it is rocenante itself; `tried` gets the path and, when
// it is not used, why (the loader's reason, or "rocenante itself").
void* openIfReal(const std::string& path, const std::string& self, std::string* tried) {
  *tried += "\n  " + path;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = dlerror();
    std::string why = error ? error : "cannot be loaded";
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // the loader repeats the path
    *tried += ": " + why;
    return nullptr;
  }
  if (isRocenante(handle) || (!self.empty() && realPathOf(path) == self)) {
    *tried += ": rocenante itself, not NCCL";
    dlclose(handle);
    return nullptr;
  }
  return handle;
}

std::vector<std::string> searchDirs() {
  std::vector<std::string> dirs;
  if (const char* env = getenv("LD_LIBRARY_PATH")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      size_t colon = list.find(':', start);
      if (colon == std::string::npos) colon = list.size();
      if (colon > start) dirs.push_back(list.substr(start, colon - start));
      start = colon + 1;
    }
  }
  for (const char* d : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                        "/usr/lib", "/usr/local/lib", "/usr/local/cuda/lib64",
                        "/usr/local/cuda/targets/x86_64-linux/lib",
                        "/usr/local/cuda/targets/sbsa-linux/lib"})
    dirs.push_back(d);
  return dirs;
}

void* findRealNccl(std::string* path, std::string* tried) {
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
  std::string tried;
  loaded->handle = findRealNccl(&loaded->path, &tried);
  if (!loaded->handle) {
    RCN_WARN(RCN_LOG_INIT, "no real NCCL library found; set ROCENANTE_NCCL_LIBRARY to the path of "
             "libnccl.so.2. Tried:%s", tried.c_str());
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
