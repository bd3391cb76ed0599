// SPDX-License-Identifier: BSD-3-Clause
// librocenante.so stands in for libnccl.so.2: it exports every nccl*/pnccl*
// symbol the installed NCCL exports, forwards to the real library, and never
// forwards to itself. No GPU needed: ncclGetVersion and ncclGetErrorString
// run without one.
#include <catch2/catch_test_macros.hpp>

#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "support/multiproc.h"

namespace {

// Names of the defined dynamic function symbols of a library, via nm.
std::set<std::string> exportedNcclSymbols(const std::string& path) {
  std::set<std::string> names;
  std::string command = "nm -D --defined-only '" + path + "' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[512];
  while (fgets(line, sizeof line, pipe)) {
    char address[128], type[8], name[256];
    if (sscanf(line, "%127s %7s %255s", address, type, name) != 3) continue;
    std::string n = name;
    if ((n.rfind("nccl", 0) == 0 || n.rfind("pnccl", 0) == 0) && (type[0] == 'T' || type[0] == 'W'))
      names.insert(n);
  }
  pclose(pipe);
  return names;
}

bool haveRealNccl() { return access(RCN_REAL_NCCL, R_OK) == 0; }

typedef ncclResult_t (*GetVersionFn)(int*);
typedef const char* (*ErrorStringFn)(ncclResult_t);

// In a fresh process (the real library is looked up once per process): opens
// `open` with the environment set as given, then calls ncclGetVersion.
// Returns the version, or -(result) when the call failed.
int versionThrough(const std::string& open, const char* forcedReal) {
  auto outcomes = rcn::test::runRanks(1, [&](int) {
    if (forcedReal) setenv("ROCENANTE_NCCL_LIBRARY", forcedReal, 1);
    else unsetenv("ROCENANTE_NCCL_LIBRARY");
    setenv("ROCENANTE_DEBUG", "NONE", 1);
    void* lib = dlopen(open.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) return fprintf(stderr, "dlopen %s: %s\n", open.c_str(), dlerror()), 200;
    auto getVersion = reinterpret_cast<GetVersionFn>(dlsym(lib, "ncclGetVersion"));
    auto errorString = reinterpret_cast<ErrorStringFn>(dlsym(lib, "pncclGetErrorString"));
    if (!getVersion || !errorString) return 201;
    int version = 0;
    ncclResult_t res = getVersion(&version);
    if (res != ncclSuccess) return 100 + static_cast<int>(res);
    const char* text = errorString(ncclInvalidUsage);
    if (!text || strlen(text) == 0) return 202;
    // Exit codes are 8 bits: report major/minor as minor (28 for 2.28).
    return (version / 100) % 100;
  });
  REQUIRE(outcomes.size() == 1);
  return outcomes[0].exitCode;
}

}  // namespace

TEST_CASE("every nccl* symbol of the installed NCCL is exported by librocenante.so") {
  if (!haveRealNccl()) SKIP("no libnccl.so.2 at " RCN_REAL_NCCL);
  std::set<std::string> real = exportedNcclSymbols(RCN_REAL_NCCL);
  std::set<std::string> ours = exportedNcclSymbols(RCN_SHARED_LIB);
  REQUIRE(real.size() > 40);
  std::string missing;
  for (const std::string& name : real)
    if (!ours.count(name)) missing += " " + name;
  INFO("missing from librocenante.so:" << missing);
  CHECK(missing.empty());
  // The tuner plugin's symbols travel in the same library.
  void* lib = dlopen(RCN_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib);
  CHECK(dlsym(lib, "ncclTunerPlugin_v5") != nullptr);
  CHECK(dlsym(lib, "rcnShimCommQuery") != nullptr);
}

TEST_CASE("calls forward to the real NCCL named by ROCENANTE_NCCL_LIBRARY") {
  if (!haveRealNccl()) SKIP("no libnccl.so.2 at " RCN_REAL_NCCL);
  CHECK(versionThrough(RCN_SHARED_LIB, RCN_REAL_NCCL) == NCCL_MINOR);
}

TEST_CASE("the shim refuses to forward to itself") {
  // Named as the real library, rocenante is recognized and rejected: the
  // call fails with ncclInvalidUsage (exit 105) instead of recursing.
  CHECK(versionThrough(RCN_SHARED_LIB, RCN_SHARED_LIB) == 100 + ncclInvalidUsage);
}

TEST_CASE("installed under the name libnccl.so.2, it finds the real one elsewhere") {
  if (!haveRealNccl()) SKIP("no libnccl.so.2 at " RCN_REAL_NCCL);
  char dir[] = "/tmp/rcn_shim_XXXXXX";
  REQUIRE(mkdtemp(dir));
  std::string alias = std::string(dir) + "/libnccl.so.2";
  REQUIRE(symlink(RCN_SHARED_LIB, alias.c_str()) == 0);
  std::string realDir = RCN_REAL_NCCL;
  realDir = realDir.substr(0, realDir.rfind('/'));
  const char* old = getenv("LD_LIBRARY_PATH");
  std::string path = std::string(dir) + ":" + realDir + (old ? std::string(":") + old : "");
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);  // read by the search, not by ld.so
  int result = versionThrough(alias, nullptr);
  if (old) setenv("LD_LIBRARY_PATH", old, 1);
  else unsetenv("LD_LIBRARY_PATH");
  unlink(alias.c_str());
  rmdir(dir);
  CHECK(result == NCCL_MINOR);
}
