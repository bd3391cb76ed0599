// SPDX-License-Identifier: BSD-3-Clause
// The tuner plugin, loaded the way NCCL loads it (dlopen + dlsym of
// ncclTunerPlugin_v6 / _v5 / _v4) and driven with synthetic cost tables.
#include <catch2/catch_test_macros.hpp>

#include <dlfcn.h>
#include <nccl.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/scoped_env.h"
#include "support/temp_file.h"

namespace {

// Our own view of NCCL's tuner ABI, written independently of plugin/tuner.cc
// from NCCL's ext-tuner documentation, so a layout slip there shows here.
typedef void (*Logger)(int, unsigned long, const char*, int, const char*, ...);
typedef ncclResult_t (*GetCollInfo)(void*, int, size_t, int, float**, int, int, int, int*);
struct V4 {
  const char* name;
  ncclResult_t (*init)(size_t, size_t, Logger, void**);
  GetCollInfo getCollInfo;
  ncclResult_t (*destroy)(void*);
};
struct NvlInfo {
  int nNvlDomains, minRanks, maxRanks;
};
struct V5 {
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, size_t, size_t, Logger, NvlInfo*, void*);
  GetCollInfo getCollInfo;
  ncclResult_t (*finalize)(void*);
};
struct V6 {  // NCCL 2.30+: v5's table and an optional chunk-size hook
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, size_t, size_t, Logger, NvlInfo*, void*);
  GetCollInfo getCollInfo;
  ncclResult_t (*finalize)(void*);
  ncclResult_t (*getChunkSize)(void*, int, size_t, int, int, int, size_t*);
};

// NCCL's log function as the tuner sees it: keeps every line with its level
// and subsystem flags.
struct LogLine {
  int level;
  unsigned long flags;
  std::string text;
};
std::vector<LogLine> ncclLogLines;
void captureLog(int level, unsigned long flags, const char*, int, const char* fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  ncclLogLines.push_back({level, flags, text});
}
constexpr int kNcclWarn = 2, kNcclInfo = 3;
constexpr unsigned long kNcclTuning = 64;

constexpr int kAlgos = 7, kProtos = 3;  // NCCL 2.27/2.28: Tree Ring CollNetDirect CollNetChain NVLS NVLSTree PAT; LL LL128 Simple
constexpr int kAllReduce = 4, kAllGather = 2;
constexpr int kTree = 0, kRing = 1, kNvls = 4;
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;

struct Table {
  float cost[kAlgos][kProtos];
  Table() {
    for (int a = 0; a < kAlgos; ++a)
      for (int p = 0; p < kProtos; ++p) cost[a][p] = 10.0f + a + 0.1f * p;
    for (int p = 0; p < kProtos; ++p) cost[kNvls][p] = -1.0f;  // not applicable here
  }
  float** raw() { return reinterpret_cast<float**>(cost); }
  // The entry NCCL would pick: the cheapest applicable one.
  std::pair<int, int> chosen() const {
    std::pair<int, int> best{-1, -1};
    float bestCost = 0;
    for (int a = 0; a < kAlgos; ++a)
      for (int p = 0; p < kProtos; ++p)
        if (cost[a][p] >= 0 && (best.first < 0 || cost[a][p] < bestCost))
          best = {a, p}, bestCost = cost[a][p];
    return best;
  }
};

void* openLibrary() {
  void* handle = dlopen(RCN_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!handle) FAIL("dlopen " << RCN_SHARED_LIB << ": " << dlerror());
  return handle;
}

const char* kPolicy =
    "classes:\n"
    "  single_host:\n"
    "    nccl:\n"
    "      - {max_bytes: 64K, algo: ring, proto: ll}\n"
    "      - {max_bytes: 1M, algo: tree}\n"
    "      - {max_bytes: 8M, algo: default, proto: simple}\n"
    "      - {max_bytes: 16M, algo: default, proto: default}\n"
    "  unknown:\n"
    "    nccl:\n"
    "      - {max_bytes: 1G, algo: ring, proto: ll128}\n";

}  // namespace

TEST_CASE("every tuner ABI version is exported") {
  void* lib = openLibrary();
  auto* v6 = static_cast<V6*>(dlsym(lib, "ncclTunerPlugin_v6"));
  auto* v5 = static_cast<V5*>(dlsym(lib, "ncclTunerPlugin_v5"));
  auto* v4 = static_cast<V4*>(dlsym(lib, "ncclTunerPlugin_v4"));
  REQUIRE(v6 != nullptr);
  REQUIRE(v5 != nullptr);
  REQUIRE(v4 != nullptr);
  CHECK(std::string(v6->name) == "rocenante");
  CHECK(std::string(v5->name) == "rocenante");
  CHECK(std::string(v4->name) == "rocenante");
  CHECK(v6->getChunkSize == nullptr);  // optional: NCCL's chunk size stands
}

TEST_CASE("v6: the policy through NCCL 2.30+'s ABI, logged through NCCL's log function") {
  rcn::test::TempFile policy(kPolicy);
  rcn::test::ScopedEnv usePolicy("ROCENANTE_POLICY", policy.path().c_str());
  void* lib = openLibrary();
  auto* v6 = static_cast<V6*>(dlsym(lib, "ncclTunerPlugin_v6"));
  REQUIRE(v6);
  ncclLogLines.clear();
  void* ctx = nullptr;
  NvlInfo nvl{1, 2, 2};
  double constants[512] = {};
  REQUIRE(v6->init(&ctx, 42, 2, 1, captureLog, &nvl, constants) == ncclSuccess);
  REQUIRE(!ncclLogLines.empty());
  const LogLine& first = ncclLogLines.front();
  CHECK(first.level == kNcclInfo);
  CHECK(first.flags == kNcclTuning);
  CHECK(first.text.find("rocenante tuner: 2 ranks on 1 nodes") != std::string::npos);
  Table t;
  int channels = 0;
  REQUIRE(v6->getCollInfo(ctx, kAllReduce, 8192, 1, t.raw(), kAlgos, kProtos, 0, &channels) == ncclSuccess);
  CHECK(t.chosen() == std::make_pair(kRing, kLL));
  CHECK(v6->finalize(ctx) == ncclSuccess);

  // A malformed policy: init fails and NCCL's log says why.
  rcn::test::TempFile broken("classes:\n  single_host:\n    nccl: 3\n");
  rcn::test::ScopedEnv useBroken("ROCENANTE_POLICY", broken.path().c_str());
  ncclLogLines.clear();
  CHECK(v6->init(&ctx, 43, 2, 1, captureLog, &nvl, constants) == ncclInvalidArgument);
  REQUIRE(!ncclLogLines.empty());
  CHECK(ncclLogLines.back().level == kNcclWarn);
  CHECK(ncclLogLines.back().text.find(broken.path()) != std::string::npos);
}

TEST_CASE("v5: the policy's NCCL preferences reweight the cost table") {
  rcn::test::TempFile policy(kPolicy);
  rcn::test::ScopedEnv usePolicy("ROCENANTE_POLICY", policy.path().c_str());
  void* lib = openLibrary();
  auto* v5 = static_cast<V5*>(dlsym(lib, "ncclTunerPlugin_v5"));
  REQUIRE(v5);
  void* ctx = nullptr;
  NvlInfo nvl{1, 2, 2};
  double constants[512] = {};  // opaque to the plugin
  REQUIRE(v5->init(&ctx, 42, 2, 1, nullptr, &nvl, constants) == ncclSuccess);
  REQUIRE(ctx != nullptr);

  Table t;
  int channels = -7;
  REQUIRE(v5->getCollInfo(ctx, kAllReduce, 8192, 1, t.raw(), kAlgos, kProtos, 0, &channels) == ncclSuccess);
  CHECK(t.chosen() == std::make_pair(kRing, kLL));
  CHECK(channels == -7);  // channels are left to NCCL

  Table algoOnly;
  for (int p = 0; p < kProtos; ++p) algoOnly.cost[kTree][p] += 5.0f;  // alone, the table would pick Ring
  REQUIRE(algoOnly.chosen().first != kTree);
  v5->getCollInfo(ctx, kAllReduce, 512 * 1024, 1, algoOnly.raw(), kAlgos, kProtos, 0, &channels);
  CHECK(algoOnly.chosen() == std::make_pair(kTree, kLL));  // tree's cheapest protocol

  Table protoOnly;
  v5->getCollInfo(ctx, kAllReduce, 4 << 20, 1, protoOnly.raw(), kAlgos, kProtos, 0, &channels);
  CHECK(protoOnly.chosen() == std::make_pair(kTree, kSimple));  // simple's cheapest algorithm

  Table untouched, reference;
  v5->getCollInfo(ctx, kAllReduce, 12 << 20, 1, untouched.raw(), kAlgos, kProtos, 0, &channels);
  CHECK(memcmp(untouched.cost, reference.cost, sizeof reference.cost) == 0);
  v5->getCollInfo(ctx, kAllReduce, 64 << 20, 1, untouched.raw(), kAlgos, kProtos, 0, &channels);
  CHECK(memcmp(untouched.cost, reference.cost, sizeof reference.cost) == 0);
  v5->getCollInfo(ctx, kAllGather, 8192, 1, untouched.raw(), kAlgos, kProtos, 0, &channels);
  CHECK(memcmp(untouched.cost, reference.cost, sizeof reference.cost) == 0);

  // A preferred entry NCCL marked not applicable is never picked.
  Table noRingLL;
  noRingLL.cost[kRing][kLL] = -1.0f;
  v5->getCollInfo(ctx, kAllReduce, 8192, 1, noRingLL.raw(), kAlgos, kProtos, 0, &channels);
  CHECK(noRingLL.cost[kRing][kLL] == -1.0f);
  CHECK(v5->finalize(ctx) == ncclSuccess);

  // Five nodes: the tuner cannot tell a switch from a ring, so classes.unknown applies.
  REQUIRE(v5->init(&ctx, 43, 40, 5, nullptr, &nvl, constants) == ncclSuccess);
  Table multi;
  v5->getCollInfo(ctx, kAllReduce, 8192, 1, multi.raw(), kAlgos, kProtos, 0, &channels);
  CHECK(multi.chosen() == std::make_pair(kRing, kLL128));
  CHECK(v5->finalize(ctx) == ncclSuccess);
}

TEST_CASE("v4: the same policy through the 2.27 ABI") {
  rcn::test::TempFile policy(kPolicy);
  rcn::test::ScopedEnv usePolicy("ROCENANTE_POLICY", policy.path().c_str());
  void* lib = openLibrary();
  auto* v4 = static_cast<V4*>(dlsym(lib, "ncclTunerPlugin_v4"));
  REQUIRE(v4);
  void* ctx = nullptr;
  REQUIRE(v4->init(2, 1, nullptr, &ctx) == ncclSuccess);
  Table t;
  int channels = 0;
  REQUIRE(v4->getCollInfo(ctx, kAllReduce, 1024, 1, t.raw(), kAlgos, kProtos, 0, &channels) == ncclSuccess);
  CHECK(t.chosen() == std::make_pair(kRing, kLL));
  CHECK(v4->destroy(ctx) == ncclSuccess);
}

TEST_CASE("a malformed policy fails the tuner's init (NCCL then reports it)") {
  rcn::test::TempFile policy("classes:\n  single_host:\n    nccl: 3\n");
  rcn::test::ScopedEnv usePolicy("ROCENANTE_POLICY", policy.path().c_str());
  void* lib = openLibrary();
  auto* v5 = static_cast<V5*>(dlsym(lib, "ncclTunerPlugin_v5"));
  void* ctx = nullptr;
  NvlInfo nvl{1, 2, 2};
  CHECK(v5->init(&ctx, 1, 2, 1, nullptr, &nvl, nullptr) == ncclInvalidArgument);
}

TEST_CASE("without a policy file the tuner leaves NCCL's table alone on one host") {
  rcn::test::ScopedEnv noPolicy("ROCENANTE_POLICY", nullptr);
  void* lib = openLibrary();
  auto* v5 = static_cast<V5*>(dlsym(lib, "ncclTunerPlugin_v5"));
  void* ctx = nullptr;
  NvlInfo nvl{1, 2, 2};
  REQUIRE(v5->init(&ctx, 1, 2, 1, nullptr, &nvl, nullptr) == ncclSuccess);
  Table t, reference;
  int channels = 0;
  v5->getCollInfo(ctx, kAllReduce, 4096, 1, t.raw(), kAlgos, kProtos, 0, &channels);
  CHECK(memcmp(t.cost, reference.cost, sizeof reference.cost) == 0);
  v5->finalize(ctx);
}
