// SPDX-License-Identifier: BSD-3-Clause
// Topology files (ROCENANTE_TOPO_FILE / ROCENANTE_TOPO_DUMP_FILE), the binary
// blob ranks exchange, and the gather over an in-process bootstrap.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "core/log.h"
#include "test_topology_support.h"

using namespace rcn;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

CommTopo probedSpark() {
  TopoProbeOptions opt;
  opt.root = topotest::fixture("sysfs/spark");
  opt.useCuda = false;
  CommTopo topo;
  topo.ranks.resize(1);
  REQUIRE(topoProbeLocal(opt, 0, &topo.ranks[0]) == rcnSuccess);
  GpuInfo g;
  g.index = 0;
  g.pciBusId = "000f:01:00.0";
  g.name = "NVIDIA \"GB10\"\\";  // quotes and backslashes must survive
  g.ccMajor = 12;
  g.ccMinor = 1;
  g.integrated = true;
  g.gdr = Support::No;
  g.dmaBuf = Support::Yes;
  g.links.push_back(GpuLink{1, true, true, 0});
  topo.ranks[0].gpus.push_back(g);
  topo.ranks[0].cudaDev = 0;
  REQUIRE(topoClassify(&topo) == rcnSuccess);
  return topo;
}

// The error text of parsing `text` as a topology file named "bad.yaml".
std::string parseError(const std::string& text) {
  clearLastError();
  std::vector<RankTopo> ranks;
  rcnResult_t r = topoParseText(text, "bad.yaml", &ranks);
  CHECK(r != rcnSuccess);
  return lastErrorText();
}

const char* kGoodRank =
    "version: 1\n"
    "ranks:\n"
    "  - rank: 0\n"
    "    host: a\n";

}  // namespace

TEST_CASE("binary blob: round trip and truncation") {
  CommTopo topo = probedSpark();
  std::string blob = topoEncode(topo.ranks[0]);
  RankTopo back;
  REQUIRE(topoDecode(blob, &back) == rcnSuccess);
  CHECK(topoEncode(back) == blob);
  CHECK(back.nics.size() == 4);
  CHECK(back.gpus[0].name == topo.ranks[0].gpus[0].name);
  for (size_t cut : {size_t(0), size_t(7), blob.size() / 2, blob.size() - 1})
    CHECK(topoDecode(blob.substr(0, cut), &back) != rcnSuccess);
  std::string foreign = blob;
  foreign[0] ^= 0x55;
  CHECK(topoDecode(foreign, &back) != rcnSuccess);
}

TEST_CASE("topology file: a dump reads back to the same description") {
  CommTopo topo = probedSpark();
  std::string json = topoToJson(topo, "{\"used\": false}");
  std::vector<RankTopo> ranks;
  REQUIRE(topoParseText(json, "dump.json", &ranks) == rcnSuccess);
  REQUIRE(ranks.size() == 1);
  ranks[0].source = topo.ranks[0].source;
  CHECK(topoEncode(ranks[0]) == topoEncode(topo.ranks[0]));
}

TEST_CASE("topology file: every fixture layout survives dump and reload") {
  for (const char* name : {"spark-2node-direct.yaml", "spark-4node-ring.yaml", "switch-4node.yaml",
                           "nvlink-host-8gpu.yaml"}) {
    CommTopo topo = topotest::classifyFile(name);
    REQUIRE(!topo.ranks.empty());
    CommTopo again;
    REQUIRE(topoParseText(topoToJson(topo), name, &again.ranks) == rcnSuccess);
    REQUIRE(topoClassify(&again) == rcnSuccess);
    CHECK(again.cls == topo.cls);
    CHECK(again.reason == topo.reason);
  }
}

TEST_CASE("topology file: bad files name the file, the line and the key") {
  CHECK(contains(parseError(std::string(kGoodRank) + "    hots: b\n"), "bad.yaml:5: key 'ranks[0].hots': unknown key"));
  CHECK(contains(parseError(std::string(kGoodRank) + "    cuda_dev: zero\n"),
                 "bad.yaml:5: key 'ranks[0].cuda_dev': expected an integer, got 'zero'"));
  CHECK(contains(parseError("version: 1\nranks:\n  - rank: 0\n"), "key 'ranks[0].host': missing required key"));
  CHECK(contains(parseError("version: 2\nranks: []\n"), "bad.yaml:1: key 'version': only version 1 is known"));
  CHECK(contains(parseError("version: 1\n"), "key 'ranks': missing or empty list of ranks"));
  CHECK(contains(parseError("version: 1\nranks:\n  - rank: 0\n    host: [a\n"), "bad.yaml:"));
  CHECK(contains(parseError("version: 1\nranks:\n  - rank: 0\n    host: [a\n"), "not valid YAML/JSON"));
  CHECK(contains(parseError(std::string(kGoodRank) + "    netifs:\n      - {name: e0, ipv4: 10.0.0.300/24}\n"),
                 "bad.yaml:6: key 'ranks[0].netifs[0].ipv4': expected a.b.c.d/prefix, got '10.0.0.300/24'"));
  CHECK(contains(parseError(std::string(kGoodRank) + "  - rank: 2\n    host: b\n"),
                 "key 'ranks[1].rank': ranks must be listed in order 0..n-1, got 2"));
  CHECK(contains(parseError(std::string(kGoodRank) + "    gpus:\n      - {index: 0, gdr: maybe}\n"),
                 "key 'ranks[0].gpus[0].gdr': expected yes, no or unknown, got 'maybe'"));
  CHECK(contains(parseError(std::string(kGoodRank) + "    nics: mlx5_0\n"), "key 'ranks[0].nics': expected a list"));
  CHECK(contains(parseError("- 1\n- 2\n"), "bad.yaml:1: top level: expected a mapping"));
  CHECK(contains(parseError("version: 1\nranks:\n  - 5\n"), "bad.yaml:3: key 'ranks[0]': expected a mapping"));
  CHECK(contains(parseError("version: 1\nranks: 7\n"), "bad.yaml:2: key 'ranks': expected a list"));
  CHECK(contains(parseError(""), "top level: expected a mapping"));
  // Values that parse but cannot be right.
  CHECK(contains(parseError("version: 1\nranks:\n  - rank: 0\n    host: ''\n"), "key 'ranks[0].host': must not be empty"));
  CHECK(contains(parseError(std::string(kGoodRank) + "    cuda_dev: 7\n"),
                 "key 'ranks[0].cuda_dev': GPU 7 is not in this rank's gpus"));
  const std::string nic = std::string(kGoodRank) + "    nics:\n      - name: mlx5_0\n        ports:\n";
  CHECK(contains(parseError(nic + "          - {port: 1, mtu: -5}\n"), "key 'ranks[0].nics[0].ports[0].mtu': must not be negative"));
  CHECK(contains(parseError(nic + "          - {port: 1, gids: [{index: 0, gid: garbage}]}\n"),
                 "key 'ranks[0].nics[0].ports[0].gids[0].gid': expected an IPv6 address"));
  // What YAML would take without a word: a key twice, a second document; and
  // an address without its prefix (which would read as /32), a GPU listed twice.
  CHECK(contains(parseError(std::string(kGoodRank) + "    host: b\n"), "bad.yaml:5: key 'ranks[0].host': given twice"));
  CHECK(contains(parseError(std::string(kGoodRank) + "---\nversion: 1\n"), "bad.yaml:6: a topology file is one YAML document"));
  // yaml-cpp's own multi-document load looped for ever, allocating, on these (found by fuzz_topology_file).
  CHECK(contains(parseError(",\n"), "bad.yaml:1: not valid YAML/JSON"));
  CHECK(contains(parseError(std::string(kGoodRank) + "    gpus:\n      - {index: 0}\n, x\n"), "not valid YAML/JSON"));
  CHECK(contains(parseError(std::string(kGoodRank) + "    netifs:\n      - {name: e0, ipv4: 10.0.0.2}\n"),
                 "expected a.b.c.d/prefix, got '10.0.0.2'"));
  CHECK(contains(parseError(std::string(kGoodRank) + "    gpus:\n      - {index: 0}\n      - {index: 0}\n"),
                 "key 'ranks[0].gpus[1]': GPU index 0 given twice"));
}

TEST_CASE("topology file: GPU indices and link peers must be plausible") {
  const std::string gpus = std::string(kGoodRank) + "    gpus:\n";
  CHECK(contains(parseError(gpus + "      - {index: -1}\n"),
                 "key 'ranks[0].gpus[0].index': expected a GPU index 0..1023, got -1"));
  CHECK(contains(parseError(gpus + "      - {index: 1024}\n"), "expected a GPU index 0..1023, got 1024"));
  CHECK(contains(parseError(gpus + "      - {index: 0, links: [{peer: 2147483647}]}\n"),
                 "key 'ranks[0].gpus[0].links[0].peer': expected another GPU's index 0..1023, got 2147483647"));
  CHECK(contains(parseError(gpus + "      - {index: 0, links: [{peer: -3}]}\n"), "expected another GPU's index"));
  CHECK(contains(parseError(gpus + "      - {index: 0, links: [{peer: 0}]}\n"),
                 "expected another GPU's index 0..1023, got 0"));
  CHECK(contains(parseError(gpus + "      - {index: 0, links: [{peer: 1}, {peer: 1}]}\n"),
                 "key 'ranks[0].gpus[0].links[1].peer': GPU 1 has a link given twice"));
}

TEST_CASE("topology file: the longest GPU list reads back whole") {
  // Every index a file may give, each GPU linked to its neighbour: the
  // duplicate check must not make this quadratic (a set, not a scan).
  std::string text = std::string(kGoodRank) + "    cuda_dev: " + std::to_string(kMaxTopoGpuIndex) + "\n    gpus:\n";
  for (int i = 0; i <= kMaxTopoGpuIndex; i++)
    text += "      - {index: " + std::to_string(i) + ", links: [{peer: " + std::to_string(i ^ 1) + "}]}\n";
  std::vector<RankTopo> ranks;
  REQUIRE(topoParseText(text, "long.yaml", &ranks) == rcnSuccess);
  REQUIRE(ranks[0].gpus.size() == size_t(kMaxTopoGpuIndex) + 1);
  CHECK(ranks[0].gpus.back().links[0].peer == (kMaxTopoGpuIndex ^ 1));
  CHECK(contains(parseError(text + "      - {index: 5}\n"), "key 'ranks[0].gpus[1024]': GPU index 5 given twice"));
}

TEST_CASE("ROCENANTE_TOPO_FILE must describe as many ranks as the communicator has") {
  topotest::ScopedEnv file("ROCENANTE_TOPO_FILE", topotest::fixture("spark-4node-ring.yaml").c_str());
  clearLastError();
  RankTopo t;
  CHECK(topoDiscoverLocal(1, -1, &t, 2) == rcnInvalidArgument);
  CHECK(contains(lastErrorText(), "describes 4 ranks, the communicator has 2"));
  CHECK(topoDiscoverLocal(1, -1, &t, 4) == rcnSuccess);
  CHECK(topoDiscoverLocal(1, -1, &t) == rcnSuccess);  // the probe's single-rank view: any entry
}

TEST_CASE("topology file: a missing file is a clear error") {
  clearLastError();
  std::vector<RankTopo> ranks;
  CHECK(topoLoadFile("/nonexistent/topo.yaml", &ranks) != rcnSuccess);
  CHECK(contains(lastErrorText(), "cannot read topology file /nonexistent/topo.yaml"));
}

TEST_CASE("gather over the bootstrap, ROCENANTE_TOPO_FILE in, ROCENANTE_TOPO_DUMP_FILE out") {
  char dumpPath[] = "/tmp/rcn-topo-dump-XXXXXX";
  int fd = mkstemp(dumpPath);
  REQUIRE(fd >= 0);
  close(fd);
  topotest::ScopedEnv file("ROCENANTE_TOPO_FILE", topotest::fixture("spark-4node-ring.yaml").c_str());
  topotest::ScopedEnv dump("ROCENANTE_TOPO_DUMP_FILE", dumpPath);
  const int n = 4;
  auto group = makeLocalBootstrapGroup(n);
  std::vector<CommTopo> seen(n);
  std::vector<rcnResult_t> results(n, rcnInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++)
    threads.emplace_back([&, r] {
      auto boot = bootstrapInitLocal(group, r);
      results[r] = topoBuild(*boot, -1, &seen[r]);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; r++) {
    REQUIRE(results[r] == rcnSuccess);
    CHECK(seen[r].cls == TopoClass::MultiNodePartial);
    CHECK(seen[r].reason == seen[0].reason);
    CHECK(seen[r].ranks[r].source == topotest::fixture("spark-4node-ring.yaml"));
  }
  std::vector<RankTopo> dumped;
  REQUIRE(topoLoadFile(dumpPath, &dumped) == rcnSuccess);
  REQUIRE(dumped.size() == 4);
  CHECK(dumped[2].host == "spark-3");
  unlink(dumpPath);
}

TEST_CASE("ROCENANTE_TOPO_FILE without an entry for this rank is an error") {
  topotest::ScopedEnv file("ROCENANTE_TOPO_FILE", topotest::fixture("spark-2node-direct.yaml").c_str());
  clearLastError();
  RankTopo t;
  CHECK(topoDiscoverLocal(5, -1, &t) == rcnInvalidArgument);
  CHECK(contains(lastErrorText(), "no entry for rank 5 (it describes 2 ranks)"));
}
