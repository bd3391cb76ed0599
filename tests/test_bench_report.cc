// SPDX-License-Identifier: BSD-3-Clause
// allreduce_sweep's tables, CSV/JSON files, crossovers and the policy it writes.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <string>

#include "core/policy_file.h"
#include "sweep_policy.h"
#include "sweep_report.h"

using namespace rcn::bench;

namespace {

Point measured(const char* method, Mode mode, size_t bytes, double us, long long wrong = 0) {
  Point p;
  p.method = methodIndex(method);
  p.mode = mode;
  p.bytes = bytes;
  p.count = bytes / 2;
  p.measured = true;
  p.us = summarize({us * 0.99, us, us * 1.02});
  p.wrong = wrong;
  return p;
}

// rocenante wins in graph mode up to 64K, loses from 256K; eagerly up to
// 256K, loses at 1M; NCCL Ring LL beats NCCL's default by 20% at the small sizes.
SweepResults sample() {
  SweepResults r;
  r.nranks = 2;
  r.dtype = rcnBfloat16;
  r.op = rcnSum;
  r.backend = "gpu";
  r.methodUnavailable.assign(kNumMethods, "");
  r.methodUnavailable[methodIndex("rcn-twoshot")] = "n/a: not built";
  r.meta = {{"host", "testhost"}, {"note", "a \"quoted\" note"}};
  const size_t sizes[] = {1024, 16384, 65536, 262144, 1 << 20};
  const double oneShot[] = {2.5, 2.8, 4.0, 12.0, 30.0};
  const double nccl[] = {6.0, 7.0, 7.1, 9.5, 15.6};
  const double ringLL[] = {4.8, 5.6, 7.0, 9.4, 18.0};
  for (int i = 0; i < 5; ++i) {
    r.points.push_back(measured("rcn-oneshot", Mode::Graph, sizes[i], oneShot[i]));
    r.points.push_back(measured("nccl", Mode::Graph, sizes[i], nccl[i]));
    r.points.push_back(measured("nccl-ring", Mode::Graph, sizes[i], nccl[i] * 1.01));
    r.points.push_back(measured("nccl-ring-ll", Mode::Graph, sizes[i], ringLL[i]));
    r.points.push_back(measured("rcn-oneshot", Mode::Eager, sizes[i], oneShot[i] + 3));
    r.points.push_back(measured("nccl", Mode::Eager, sizes[i], i < 4 ? 40.0 : 20.0));
  }
  Point na;
  na.method = methodIndex("nccl-symm");
  na.mode = Mode::Graph;
  na.bytes = 1024;
  na.count = 512;
  na.note = "ncclCommWindowRegister failed";
  r.points.push_back(na);
  return r;
}

size_t countLines(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("sweep report: bandwidths follow nccl-tests") {
  // 1 MB in 10 us: algbw 104.8576 GB/s; busbw with 2 ranks equals it, with 8 ranks 7/4 of it.
  CHECK(algBandwidthGBs(1 << 20, 10.0) == Catch::Approx(104.8576));
  CHECK(busBandwidthGBs(1 << 20, 10.0, 2) == Catch::Approx(104.8576));
  CHECK(busBandwidthGBs(1 << 20, 10.0, 8) == Catch::Approx(104.8576 * 14 / 8));
  CHECK(algBandwidthGBs(1024, 0) == 0);
}

TEST_CASE("sweep report: speedups and the crossover") {
  SweepResults r = sample();
  const Point* p = findPoint(r, methodIndex("rcn-oneshot"), Mode::Graph, 1024);
  REQUIRE(p);
  CHECK(speedupOver(r, *p, kBaselineDefault) == Catch::Approx(6.0 / 2.5));
  CHECK(speedupOver(r, *p, kBaselineRing) == Catch::Approx(6.06 / 2.5));
  CHECK(bestNcclAt(r, Mode::Graph, 1024) == methodIndex("nccl-ring-ll"));
  Crossover c = findCrossover(r, methodIndex("rcn-oneshot"), Mode::Graph);
  CHECK(c.compared);
  CHECK(c.winsUpTo == 65536);
  CHECK(c.firstLoss == 262144);
  Crossover e = findCrossover(r, methodIndex("rcn-oneshot"), Mode::Eager);
  CHECK(e.winsUpTo == 262144);
  CHECK(e.firstLoss == 1 << 20);
  // A wrong result never counts as a win.
  r.points[0].wrong = 3;
  CHECK(findCrossover(r, methodIndex("rcn-oneshot"), Mode::Graph).winsUpTo == 0);
}

TEST_CASE("sweep report: table, CSV and JSON carry every point") {
  SweepResults r = sample();
  std::string table = formatTables(r);
  CHECK(table.find("#wrong") != std::string::npos);
  CHECK(table.find("busbw") != std::string::npos);
  CHECK(table.find("rocenante one-shot") != std::string::npos);
  CHECK(table.find("rcn-twoshot: n/a: not built") != std::string::npos);
  CHECK(table.find("n/a: ncclCommWindowRegister failed") != std::string::npos);
  CHECK(table.find("up to 64K, not at 256K") != std::string::npos);
  CHECK(table.find("2.40x") != std::string::npos);

  std::string csv = toCsv(r);
  CHECK(countLines(csv) == 1 + r.points.size());
  CHECK(csv.rfind("mode,method,bytes,count,type,redop,nranks,time_us", 0) == 0);
  CHECK(csv.find("graph,rcn-oneshot,1024,512,bf16,sum,2,2.5000") != std::string::npos);

  std::string json = toJson(r);
  CHECK(json.find("\"wins_up_to_bytes\": 65536") != std::string::npos);
  CHECK(json.find("a \\\"quoted\\\" note") != std::string::npos);
  CHECK(json.find("\"measured\": false") != std::string::npos);
  CHECK(jsonEscape("a\nb\\") == "a\\nb\\\\");
  // JSON is UTF-8: valid sequences pass, stray bytes become U+FFFD.
  CHECK(jsonEscape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(jsonEscape("caf\xe9") == "caf\\ufffd");
  CHECK(jsonEscape("\xc3") == "\\ufffd");                // truncated
  CHECK(jsonEscape("\xc0\xaf") == "\\ufffd\\ufffd");   // overlong
  CHECK(jsonEscape("\xed\xa0\x80") == "\\ufffd\\ufffd\\ufffd");  // a surrogate
  // A long text is not cut (the report's printf helper once stopped at 512 bytes).
  r.meta.push_back({"note", std::string(2000, '"')});
  const std::string longJson = toJson(r);
  std::string escapedQuotes;
  for (int i = 0; i < 2000; ++i) escapedQuotes += "\\\"";
  CHECK(longJson.find("\"note\": \"" + escapedQuotes + "\"") != std::string::npos);
  CHECK(longJson.find("\"tool\"") != std::string::npos);
}

TEST_CASE("sweep policy: crossovers and NCCL preferences") {
  SweepResults r = sample();
  PolicyChoice c = choosePolicy(r);
  CHECK(c.haveGraph);
  CHECK(c.haveEager);
  CHECK(c.oneShotMaxBytesGraph == 65536);
  CHECK(c.oneShotMaxBytes == 262144);
  // Ring LL is >= 5% faster than the default up to 16K, not beyond.
  REQUIRE(c.nccl.size() == 2);
  CHECK(c.nccl[0].maxBytes == 16384);
  CHECK(std::string(c.nccl[0].algo) == "ring");
  CHECK(std::string(c.nccl[0].proto) == "ll");
  CHECK(c.nccl[1].maxBytes == 1 << 20);
  CHECK(std::string(c.nccl[1].proto) == "default");

  std::string yaml = policyYaml(r, c, "single_host");
  CHECK(yaml.find("one_shot_max_bytes_graph: 65536") != std::string::npos);
  CHECK(yaml.find("one_shot_max_bytes: 262144") != std::string::npos);
  // The buffers are sized from the thresholds: no advice to set ROCENANTE_MAX_BYTES,
  // which would replace both thresholds with one.
  CHECK(yaml.find("ROCENANTE_MAX_BYTES") == std::string::npos);
#ifdef ROCENANTE_HAVE_YAML
  // The library itself accepts what the sweep writes, a note of several lines included.
  r.meta.push_back({"note", "first line\nforce: nccl"});
  yaml = policyYaml(r, c, "single_host");
  rcn::PolicyFile file;
  std::string error;
  REQUIRE(rcn::policyFileParse(yaml, "sweep.yaml", &file, &error) == rcnSuccess);
  CHECK(!file.force);  // the note stayed a comment
  const rcn::PolicyOverrides& o = file.perClass.at(rcn::TopoClass::SingleHost);
  CHECK(*o.oneShotMaxBytes == 262144);
  CHECK(*o.oneShotMaxBytesGraph == 65536);
  REQUIRE(o.ncclPrefs);
  CHECK(o.ncclPrefs->size() == 2);
  CHECK((*o.ncclPrefs)[0].proto == rcn::NcclProto::LL);
  CHECK((*o.ncclPrefs)[0].algo == rcn::NcclAlgo::Ring);
  REQUIRE(rcn::policyFileParse(policyYaml(r, c, "default"), "sweep.yaml", &file, &error) == rcnSuccess);
  CHECK(*file.all.oneShotMaxBytesGraph == 65536);
#endif
}

TEST_CASE("sweep policy: no NCCL overrides when the default is best, 0 when rocenante never wins") {
  SweepResults r;
  r.nranks = 2;
  r.backend = "gpu";
  r.methodUnavailable.assign(kNumMethods, "");
  r.points.push_back(measured("rcn-oneshot", Mode::Graph, 1024, 9.0));
  r.points.push_back(measured("nccl", Mode::Graph, 1024, 6.0));
  r.points.push_back(measured("nccl-ring-ll", Mode::Graph, 1024, 5.9));  // within 5%: noise
  PolicyChoice c = choosePolicy(r);
  CHECK(c.haveGraph);
  CHECK_FALSE(c.haveEager);
  CHECK(c.oneShotMaxBytesGraph == 0);
  CHECK(c.nccl.empty());
  std::string yaml = policyYaml(r, c, "single_host");
  CHECK(yaml.find("# one_shot_max_bytes: not measured") != std::string::npos);
#ifdef ROCENANTE_HAVE_YAML
  rcn::PolicyFile file;
  std::string error;
  CHECK(rcn::policyFileParse(yaml, "sweep.yaml", &file, &error) == rcnSuccess);
#endif
}

// A crossover the sizes measured do not bracket is not written: it would cap
// the fast path below sizes where it won (a sweep that stopped early), or turn
// it off at sizes never measured (a sweep that started high).
TEST_CASE("sweep policy: a crossover outside the sizes measured is left to the built-in threshold") {
  SweepResults r;
  r.nranks = 2;
  r.backend = "gpu";
  r.methodUnavailable.assign(kNumMethods, "");
  for (size_t bytes : {8192, 16384, 32768}) {  // eager: rocenante wins everywhere
    r.points.push_back(measured("rcn-oneshot", Mode::Eager, bytes, 5.0));
    r.points.push_back(measured("nccl", Mode::Eager, bytes, 9.0));
  }
  for (size_t bytes : {1 << 20, 2 << 20}) {  // graph: only large sizes, rocenante loses from the first
    r.points.push_back(measured("rcn-oneshot", Mode::Graph, bytes, 90.0));
    r.points.push_back(measured("nccl", Mode::Graph, bytes, 50.0));
  }
  PolicyChoice c = choosePolicy(r);
  CHECK(c.haveEager);
  CHECK(c.haveGraph);
  CHECK(c.eagerUnknown.find("won at every size measured, up to 32768") != std::string::npos);
  CHECK(c.graphUnknown.find("lost at the smallest size measured, 1048576") != std::string::npos);
  const std::string yaml = policyYaml(r, c, "single_host");
  CHECK(yaml.find("\n    one_shot_max_bytes") == std::string::npos);  // neither key written
  CHECK(yaml.find("# one_shot_max_bytes: not written") != std::string::npos);
  CHECK(yaml.find("# one_shot_max_bytes_graph: not written") != std::string::npos);
#ifdef ROCENANTE_HAVE_YAML
  rcn::PolicyFile file;
  std::string error;
  REQUIRE(rcn::policyFileParse(yaml, "sweep.yaml", &file, &error) == rcnSuccess);
  const bool written = file.perClass.count(rcn::TopoClass::SingleHost) &&
                       file.perClass.at(rcn::TopoClass::SingleHost).oneShotMaxBytes.has_value();
  CHECK_FALSE(written);
#endif
  // From the bottom (1 KB or less), a loss at the first size is a real 0.
  r.points.clear();
  r.points.push_back(measured("rcn-oneshot", Mode::Eager, 1024, 9.0));
  r.points.push_back(measured("nccl", Mode::Eager, 1024, 5.0));
  c = choosePolicy(r);
  CHECK(c.eagerUnknown.empty());
  CHECK(policyYaml(r, c, "single_host").find("    one_shot_max_bytes: 0\n") != std::string::npos);
}

TEST_CASE("sweep policy: a run with nothing to compare still writes a file the library accepts") {
  SweepResults r;
  r.nranks = 2;
  r.backend = "host";
  r.methodUnavailable.assign(kNumMethods, "");
  r.points.push_back(measured("rcn-oneshot", Mode::Eager, 1024, 9.0));
  PolicyChoice c = choosePolicy(r);
  CHECK_FALSE(c.haveEager);
  std::string yaml = policyYaml(r, c, "single_host");
  CHECK(yaml.find("single_host: {}") != std::string::npos);
#ifdef ROCENANTE_HAVE_YAML
  rcn::PolicyFile file;
  std::string error;
  CHECK(rcn::policyFileParse(yaml, "sweep.yaml", &file, &error) == rcnSuccess);
  CHECK(error.empty());
#endif
}
