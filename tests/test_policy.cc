// SPDX-License-Identifier: BSD-3-Clause
// The routing policy: built-in defaults, the YAML file, the environment on
// top, the route function, clear errors for malformed files and values, and
// what the self-test's timings decide (on or off, and where the one-shot stops).
#include <catch2/catch_test_macros.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/params.h"
#include "core/policy.h"
#include "support/scoped_env.h"
#include "support/temp_file.h"
#include "core/policy_file.h"
#include "core/selftest.h"

using namespace rcn;

namespace {

using rcn::test::ScopedEnv;
using rcn::test::TempFile;

CallDesc call(size_t bytes, rcnPath_t transport = rcnPathP2p, int nranks = 2) {
  CallDesc c;
  c.bytes = bytes;
  c.nranks = nranks;
  c.transport = transport;
  c.topo = TopoClass::SingleHost;
  return c;
}

}  // namespace

TEST_CASE("built-in defaults differ per topology class") {
  CHECK(policyDefaults(TopoClass::SingleHost, rcnPathP2p, 4).oneShotMaxBytes == 256 * 1024);
  CHECK(policyDefaults(TopoClass::MultiNodeAnyToAny, rcnPathProxy, 2).oneShotMaxBytes == 1024 * 1024);
  PolicyConfig partial = policyDefaults(TopoClass::MultiNodePartial, rcnPathProxy, 4);
  CHECK(partial.oneShotMaxBytes == 0);
  REQUIRE(partial.ncclPrefs.size() == 2);
  CHECK(partial.ncclPrefs[0].algo == NcclAlgo::Ring);
  CHECK(partial.ncclPrefs[0].proto == NcclProto::LL);
}

TEST_CASE("two ranks over peer memory take the one-shot to 4 MB; more ranks, or another path, 256 KB") {
  const PolicyConfig two = policyDefaults(TopoClass::SingleHost, rcnPathP2p, 2);
  CHECK(two.oneShotMaxBytes == 4 * 1024 * 1024);
  CHECK(two.oneShotMaxBytesGraph == 4 * 1024 * 1024);
  CHECK(policyDefaults(TopoClass::SingleHost, rcnPathP2p, 3).oneShotMaxBytes == 256 * 1024);
  CHECK(policyDefaults(TopoClass::SingleHost, rcnPathP2p, 8).oneShotMaxBytesGraph == 256 * 1024);
  CHECK(policyDefaults(TopoClass::SingleHost, rcnPathProxy, 2).oneShotMaxBytes == 256 * 1024);
  CHECK(policyDefaults(TopoClass::Unknown, rcnPathP2p, 2).oneShotMaxBytes == 256 * 1024);
}

TEST_CASE("policyRoute: thresholds, graph capture, force, disable") {
  PolicyConfig c = policyDefaults(TopoClass::SingleHost, rcnPathP2p, 4);
  c.oneShotMaxBytesGraph = 1024 * 1024;
  CHECK(policyRoute(call(8 * 1024), c).route == Route::OneShot);
  CHECK(policyRoute(call(256 * 1024), c).route == Route::OneShot);
  CHECK(policyRoute(call(256 * 1024 + 16), c).route == Route::Nccl);
  CallDesc graph = call(512 * 1024);
  graph.graphCapture = true;
  CHECK(policyRoute(graph, c).route == Route::OneShot);
  CHECK(policyRoute(call(0), c).route == Route::Nccl);
  CHECK(policyRoute(call(1024, rcnPathNccl), c).route == Route::Nccl);  // no fast path built
  CHECK(policyRoute(call(1024, rcnPathP2p, 1), c).route == Route::Nccl);
  CHECK(policyRoute(call(1024, rcnPathP2p, 16), c).route == Route::Nccl);  // beyond max_ranks
  CallDesc partial = call(1024);
  partial.topo = TopoClass::MultiNodePartial;
  CHECK(policyRoute(partial, c).route == Route::Nccl);

  PolicyConfig forced = c;
  forced.force = 1;
  CHECK(policyRoute(call(64 << 20), forced).route == Route::OneShot);
  CHECK(policyRoute(call(1024, rcnPathNccl), forced).route == Route::Nccl);
  forced.force = -1;
  CHECK(policyRoute(call(1024), forced).route == Route::Nccl);
  PolicyConfig off = c;
  off.disabled = true;
  CHECK(policyRoute(call(1024), off).route == Route::Nccl);

  c.twoShotMaxBytes = 4 << 20;
  CHECK(policyRoute(call(1 << 20), c).route == Route::TwoShot);
}

TEST_CASE("policyRoute carries NCCL preferences for calls NCCL keeps") {
  PolicyConfig c = policyDefaults(TopoClass::MultiNodePartial, rcnPathProxy, 4);
  CallDesc small = call(4096, rcnPathNccl);
  RouteDecision d = policyRoute(small, c);
  CHECK(d.route == Route::Nccl);
  CHECK(d.algo == NcclAlgo::Ring);
  CHECK(d.proto == NcclProto::LL);
  d = policyRoute(call(512 * 1024, rcnPathNccl), c);
  CHECK(d.proto == NcclProto::LL128);
  d = policyRoute(call(8 << 20, rcnPathNccl), c);
  CHECK(d.algo == NcclAlgo::Default);
  CHECK(d.proto == NcclProto::Default);
}

TEST_CASE("the agreement text changes with every routing field") {
  PolicyConfig a = policyDefaults(TopoClass::SingleHost, rcnPathP2p, 4);
  a.ncclPrefs.push_back({1024, NcclAlgo::Ring, NcclProto::LL});
  CHECK(policyAgreementText(a) == policyAgreementText(PolicyConfig(a)));
  // Each field that routes a call, changed alone.
  const std::vector<std::pair<const char*, std::function<void(PolicyConfig&)>>> changes = {
      {"disabled", [](PolicyConfig& c) { c.disabled = !c.disabled; }},
      {"force", [](PolicyConfig& c) { c.force = -1; }},
      {"oneShotMaxBytes", [](PolicyConfig& c) { c.oneShotMaxBytes += 16; }},
      {"oneShotMaxBytesGraph", [](PolicyConfig& c) { c.oneShotMaxBytesGraph += 16; }},
      {"twoShotMaxBytes", [](PolicyConfig& c) { c.twoShotMaxBytes += 16; }},
      {"maxRanks", [](PolicyConfig& c) { c.maxRanks += 1; }},
      {"allGatherMaxBytes", [](PolicyConfig& c) { c.allGatherMaxBytes += 16; }},
      {"reduceScatterMaxBytes", [](PolicyConfig& c) { c.reduceScatterMaxBytes += 16; }},
      {"a preference's size", [](PolicyConfig& c) { c.ncclPrefs[0].maxBytes += 16; }},
      {"a preference's algorithm", [](PolicyConfig& c) { c.ncclPrefs[0].algo = NcclAlgo::Tree; }},
      {"a preference's protocol", [](PolicyConfig& c) { c.ncclPrefs[0].proto = NcclProto::Simple; }},
      {"one more preference",
       [](PolicyConfig& c) {
         c.ncclPrefs.push_back({4096, NcclAlgo::Tree, NcclProto::LL});
       }},
  };
  for (const auto& [field, change] : changes) {
    INFO(field);
    PolicyConfig b = a;
    change(b);
    CHECK(policyAgreementText(a) != policyAgreementText(b));
  }
  PolicyConfig fromElsewhere = a;
  fromElsewhere.source = "another file";  // where the values came from is no routing field
  CHECK(policyAgreementText(a) == policyAgreementText(fromElsewhere));
}

TEST_CASE("environment on top of defaults, and malformed values are errors") {
  ScopedEnv noFile("ROCENANTE_POLICY", nullptr);
  ScopedEnv noForce("ROCENANTE_FORCE", nullptr);
  ScopedEnv noDisable("ROCENANTE_DISABLE", nullptr);
  PolicyConfig c;
  {
    ScopedEnv max("ROCENANTE_MAX_BYTES", "64K");
    REQUIRE(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnSuccess);
    CHECK(c.oneShotMaxBytes == 64 * 1024);
    CHECK(c.oneShotMaxBytesGraph == 64 * 1024);
  }
  for (const char* nccl : {"nccl", " nccl\t"}) {  // spaces around, as any variable may have
    ScopedEnv force("ROCENANTE_FORCE", nccl);
    REQUIRE(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnSuccess);
    CHECK(c.force == -1);
  }
  {
    ScopedEnv force("ROCENANTE_FORCE", "sometimes");
    clearLastError();
    CHECK(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnInvalidArgument);
    CHECK(std::string(lastErrorText()).find("ROCENANTE_FORCE") != std::string::npos);
  }
  for (const char* bad : {"lots", "-1", "2G"}) {  // 2G: past the 1 GiB the buffers may take
    INFO(bad);
    ScopedEnv max("ROCENANTE_MAX_BYTES", bad);
    clearLastError();
    CHECK(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnInvalidArgument);
    CHECK(std::string(lastErrorText()).find("ROCENANTE_MAX_BYTES") != std::string::npos);
    CHECK(rcn::paramValidate() == rcnInvalidArgument);
  }
  {
    ScopedEnv disable("ROCENANTE_DISABLE", "maybe");
    CHECK(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnInvalidArgument);
  }
}

#ifdef ROCENANTE_HAVE_YAML

TEST_CASE("ROCENANTE_FORCE set but empty leaves the policy file's force alone") {
  TempFile policy("force: nccl\n");
  ScopedEnv file("ROCENANTE_POLICY", policy.path().c_str());
  ScopedEnv noDisable("ROCENANTE_DISABLE", nullptr);
  PolicyConfig c;
  for (const char* unsetLike : {"", "  "}) {
    ScopedEnv force("ROCENANTE_FORCE", unsetLike);
    REQUIRE(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnSuccess);
    CHECK(c.force == -1);
  }
}

TEST_CASE("the shipped sample policy parses") {
  PolicyFile file;
  std::string error;
  REQUIRE(policyFileLoad(RCN_SAMPLE_POLICY, &file, &error) == rcnSuccess);
  CHECK(file.force == 0);
  REQUIRE(file.perClass.count(TopoClass::MultiNodePartial) == 1);
  CHECK(file.perClass[TopoClass::MultiNodePartial].ncclPrefs->size() == 2);
  CHECK(*file.perClass[TopoClass::SingleHost].oneShotMaxBytes == 256 * 1024);
}

TEST_CASE("precedence: defaults < classes.default < own class < environment") {
  TempFile policy(
      "classes:\n"
      "  default:\n"
      "    one_shot_max_bytes: 32K\n"
      "    max_ranks: 4\n"
      "  single_host:\n"
      "    one_shot_max_bytes: 128K\n"
      "    nccl:\n"
      "      - {max_bytes: 1M, algo: tree, proto: simple}\n"
      "      - {max_bytes: 4K, proto: ll}\n");
  ScopedEnv file("ROCENANTE_POLICY", policy.path().c_str());
  ScopedEnv noMax("ROCENANTE_MAX_BYTES", nullptr);
  ScopedEnv noForce("ROCENANTE_FORCE", nullptr);
  PolicyConfig c;
  REQUIRE(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnSuccess);
  CHECK(c.oneShotMaxBytes == 128 * 1024);          // own class beats classes.default
  CHECK(c.oneShotMaxBytesGraph == 4 * 1024 * 1024);  // not in the file: the built-in default for two ranks
  CHECK(c.maxRanks == 4);                          // from classes.default
  REQUIRE(c.ncclPrefs.size() == 2);
  CHECK(c.ncclPrefs[0].maxBytes == 4096);          // sorted by size
  CHECK(c.ncclPrefs[0].proto == NcclProto::LL);
  REQUIRE(policyLoad(TopoClass::MultiNodeAnyToAny, rcnPathProxy, 2, &c) == rcnSuccess);
  CHECK(c.oneShotMaxBytes == 32 * 1024);           // classes.default only
  {
    ScopedEnv max("ROCENANTE_MAX_BYTES", "8K");
    REQUIRE(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnSuccess);
    CHECK(c.oneShotMaxBytes == 8 * 1024);          // environment beats the file
  }
}

TEST_CASE("all-gather and reduce-scatter: thresholds of their own over the whole buffer") {
  ScopedEnv noFile("ROCENANTE_POLICY", nullptr);
  ScopedEnv noForce("ROCENANTE_FORCE", nullptr);
  ScopedEnv noMax("ROCENANTE_MAX_BYTES", nullptr);
  ScopedEnv noGather("ROCENANTE_ALLGATHER_MAX_BYTES", nullptr);
  ScopedEnv noScatter("ROCENANTE_REDUCESCATTER_MAX_BYTES", nullptr);
  PolicyConfig c = policyDefaults(TopoClass::SingleHost, rcnPathP2p, 2);
  CHECK(c.allGatherMaxBytes == 256 * 1024);  // not the all-reduce's 4 MB for two ranks
  CHECK(c.reduceScatterMaxBytes == 256 * 1024);
  CHECK(policyDefaults(TopoClass::MultiNodePartial, rcnPathProxy, 4).allGatherMaxBytes == 0);
  for (Collective coll : {Collective::AllGather, Collective::ReduceScatter}) {
    INFO(collectiveName(coll));
    CallDesc atMax = call(256 * 1024), past = call(256 * 1024 + 1);
    atMax.coll = past.coll = coll;
    CHECK(policyRoute(atMax, c).route == Route::OneShot);
    CHECK(policyRoute(past, c).route == Route::Nccl);
    past.graphCapture = true;  // no graph threshold of their own
    CHECK(policyRoute(past, c).route == Route::Nccl);
    PolicyConfig capped = c;
    policyCapOneShot(&capped, coll, 0);  // the self-test's fallback for one collective
    CHECK(policyRoute(atMax, capped).route == Route::Nccl);
    CallDesc reduce = call(1024);
    CHECK(policyRoute(reduce, capped).route == Route::OneShot);  // the all-reduce keeps its own
  }
  ScopedEnv gather("ROCENANTE_ALLGATHER_MAX_BYTES", "64K");
  ScopedEnv scatter("ROCENANTE_REDUCESCATTER_MAX_BYTES", "0");
  REQUIRE(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnSuccess);
  CHECK(c.allGatherMaxBytes == 64 * 1024);
  CHECK(c.reduceScatterMaxBytes == 0);
  CHECK(c.oneShotMaxBytes == 4 * 1024 * 1024);
  ScopedEnv bad("ROCENANTE_ALLGATHER_MAX_BYTES", "2G");
  CHECK(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnInvalidArgument);
}

#ifdef ROCENANTE_HAVE_YAML
TEST_CASE("policy files set all_gather_max_bytes and reduce_scatter_max_bytes per class") {
  TempFile policy(
      "classes:\n"
      "  default:\n"
      "    all_gather_max_bytes: 32K\n"
      "  single_host:\n"
      "    reduce_scatter_max_bytes: 8K\n");
  ScopedEnv file("ROCENANTE_POLICY", policy.path().c_str());
  ScopedEnv noGather("ROCENANTE_ALLGATHER_MAX_BYTES", nullptr);
  ScopedEnv noScatter("ROCENANTE_REDUCESCATTER_MAX_BYTES", nullptr);
  PolicyConfig c;
  REQUIRE(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnSuccess);
  CHECK(c.allGatherMaxBytes == 32 * 1024);
  CHECK(c.reduceScatterMaxBytes == 8 * 1024);
}
#endif

namespace {

// Parses text and returns the error message ("" on success).
std::string parseError(const std::string& text) {
  PolicyFile file;
  std::string error;
  if (policyFileParse(text, "bad.yaml", &file, &error) == rcnSuccess) return "";
  return error;
}

}  // namespace

TEST_CASE("malformed files name the file, the line and the key") {
  std::string e = parseError("version: 1\nclasses:\n  single_host:\n    one_shot_max_byte: 4K\n");
  CHECK(e.find("bad.yaml:4:") != std::string::npos);
  CHECK(e.find("classes.single_host.one_shot_max_byte") != std::string::npos);
  CHECK(e.find("unknown key") != std::string::npos);

  e = parseError("classes:\n  single_host:\n    one_shot_max_bytes: big\n");
  CHECK(e.find("bad.yaml:3:") != std::string::npos);
  CHECK(e.find("one_shot_max_bytes") != std::string::npos);

  e = parseError("force: always\n");
  CHECK(e.find("bad.yaml:1:") != std::string::npos);
  CHECK(e.find("'force'") != std::string::npos);

  e = parseError("classes:\n  single_host:\n    one_shot_max_bytes_graph: 2G\n");
  CHECK(e.find("bad.yaml:3:") != std::string::npos);
  CHECK(e.find("one_shot_max_bytes_graph") != std::string::npos);
  CHECK(e.find("at most 1G") != std::string::npos);

  e = parseError("classes:\n  default:\n    two_shot_max_bytes: 1M\n");
  CHECK(e.find("bad.yaml:3:") != std::string::npos);
  CHECK(e.find("no two-shot kernel") != std::string::npos);
  CHECK(parseError("classes:\n  default:\n    two_shot_max_bytes: 0\n") == "");

  e = parseError("classes:\n  rack:\n    max_ranks: 2\n");
  CHECK(e.find("classes.rack") != std::string::npos);

  e = parseError("classes:\n  default:\n    nccl:\n      - {algo: ring}\n");
  CHECK(e.find("max_bytes") != std::string::npos);

  e = parseError("classes:\n  default:\n    nccl:\n      - {max_bytes: 1K, proto: fast}\n");
  CHECK(e.find("bad.yaml:4:") != std::string::npos);
  CHECK(e.find("proto") != std::string::npos);

  e = parseError("classes: [1, 2\n");
  CHECK(e.find("not valid YAML") != std::string::npos);

  e = parseError("version: 2\n");
  CHECK(e.find("version") != std::string::npos);

  CHECK(parseError("") == "");  // an empty file changes nothing

  // YAML would keep one of two equal keys, and drop a second document, without a word.
  e = parseError("force: nccl\nforce: rocenante\n");
  CHECK(e.find("bad.yaml:2: key 'force': given twice") != std::string::npos);
  e = parseError("classes:\n  single_host:\n    max_ranks: 2\n    max_ranks: 4\n");
  CHECK(e.find("bad.yaml:4: key 'classes.single_host.max_ranks': given twice") != std::string::npos);
  e = parseError("version: 1\n---\ndisable: true\n");
  CHECK(e.find("one YAML document") != std::string::npos);
  CHECK(parseError("---\nversion: 1\n") == "");  // one document, marked as such
  CHECK(parseError("version: 1\n---\n") == "");  // and a final empty one
  // yaml-cpp's own multi-document load looped for ever, allocating, on these.
  for (const char* endless : {",\n", "[a]\n,\n", "version: 1\n---\n,\n"})
    CHECK(parseError(endless).find("not valid YAML") != std::string::npos);
}

TEST_CASE("policyLoad fails at a bad or missing file, naming it") {
  {
    TempFile policy("classes:\n  default:\n    max_ranks: -3\n");
    const std::string& path = policy.path();
    ScopedEnv file("ROCENANTE_POLICY", path.c_str());
    PolicyConfig c;
    clearLastError();
    CHECK(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnInvalidArgument);
    std::string last = lastErrorText();
    CHECK(last.find(path + ":3:") != std::string::npos);
    CHECK(last.find("max_ranks") != std::string::npos);
  }
  {
    ScopedEnv file("ROCENANTE_POLICY", "/nonexistent/policy.yaml");
    PolicyConfig c;
    clearLastError();
    CHECK(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnInvalidArgument);
    CHECK(std::string(lastErrorText()).find("/nonexistent/policy.yaml") != std::string::npos);
  }
  // A directory or a device is refused by name, not read as empty or without end.
  for (const char* path : {"/tmp", "/dev/zero"}) {
    ScopedEnv file("ROCENANTE_POLICY", path);
    PolicyConfig c;
    clearLastError();
    CHECK(policyLoad(TopoClass::SingleHost, rcnPathP2p, 2, &c) == rcnInvalidArgument);
    CHECK(std::string(lastErrorText()).find(std::string(path) + ": not a regular file") != std::string::npos);
  }
}

#else

TEST_CASE("without yaml-cpp a policy file is a clear error") {
  PolicyFile file;
  std::string error;
  CHECK(policyFileParse("version: 1\n", "p.yaml", &file, &error) == rcnInvalidArgument);
  CHECK(error.find("built without yaml-cpp") != std::string::npos);
}

#endif

TEST_CASE("self-test judgement: small sizes decide on or off by their sums, larger ones cap the threshold") {
  const std::vector<size_t> sizes = {256, 8192, 65536, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024};
  SECTION("the fast path wins everywhere: no cap") {
    const SelfTestJudgement j = judgeSelfTestTimes(sizes, {3, 3.5, 3.5, 4.5, 9.3, 27.7}, {7, 7, 7.5, 9.3, 15.4, 30.8});
    CHECK_FALSE(j.slower);
    CHECK(j.usFast == 14.5);
    CHECK(j.usNccl == 30.8);
    CHECK(j.capBytes == 4 * 1024 * 1024);
  }
  SECTION("NCCL faster at 4 MB only: the cap stops at 1 MB, the small sizes still decide on") {
    const SelfTestJudgement j = judgeSelfTestTimes(sizes, {3, 3.5, 3.5, 4.5, 9.3, 40}, {7, 7, 7.5, 9.3, 15.4, 30.8});
    CHECK_FALSE(j.slower);
    CHECK(j.capBytes == 1024 * 1024);
  }
  SECTION("NCCL faster from 1 MB: the cap is the largest small size; a later win does not lift it") {
    const SelfTestJudgement j = judgeSelfTestTimes(sizes, {3, 3.5, 3.5, 4.5, 20, 20}, {7, 7, 7.5, 9.3, 15.4, 30.8});
    CHECK(j.capBytes == 256 * 1024);
  }
  SECTION("within the 10 % noise margin counts as a win") {
    const SelfTestJudgement j = judgeSelfTestTimes(sizes, {3, 3.5, 3.5, 4.5, 16.9, 33.8}, {7, 7, 7.5, 9.3, 15.4, 30.8});
    CHECK(j.capBytes == 4 * 1024 * 1024);
  }
  SECTION("slower on the small sizes turns the fast path off, whatever the large ones say") {
    const SelfTestJudgement j = judgeSelfTestTimes(sizes, {8, 8, 9, 11, 9, 27}, {7, 7, 7.5, 9.3, 15.4, 30.8});
    CHECK(j.slower);
    CHECK(j.capBytes == 4 * 1024 * 1024);
  }
  SECTION("only small sizes timed: the cap is the largest of them") {
    const SelfTestJudgement j = judgeSelfTestTimes({256, 8192, 65536}, {3, 3, 3}, {7, 7, 7});
    CHECK_FALSE(j.slower);
    CHECK(j.capBytes == 65536);
  }
}

TEST_CASE("self-test cap: every rank takes the smallest cap voted, and only below the largest size timed") {
  int capper = 7;
  CHECK(selfTestAgreedCap({4u << 20, 4u << 20}, 4u << 20, &capper) == (4u << 20));
  CHECK(capper == -1);
  CHECK(selfTestAgreedCap({4u << 20, 1u << 20, 256u << 10, 256u << 10}, 4u << 20, &capper) == (256u << 10));
  CHECK(capper == 2);
  CHECK(selfTestAgreedCap({1u << 20}, 4u << 20, &capper) == (1u << 20));
  CHECK(capper == 0);
}
