// SPDX-License-Identifier: BSD-3-Clause
// allreduce_sweep's command line, size list and statistics.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <string>
#include <vector>

#include "sweep_options.h"
#include "sweep_plan.h"
#include "sweep_stats.h"

using namespace rcn::bench;

namespace {

bool parse(std::vector<const char*> args, SweepOptions* o, std::string* why) {
  args.insert(args.begin(), "allreduce_sweep");
  return parseSweepArgs(static_cast<int>(args.size()), args.data(), o, why);
}

}  // namespace

TEST_CASE("sweep options: defaults are a quick bf16 sum run of both modes") {
  SweepOptions o;
  std::string why;
  REQUIRE(parse({}, &o, &why));
  CHECK(o.dtype == rcnBfloat16);
  CHECK(o.op == rcnSum);
  CHECK(o.graph);
  CHECK(o.eager);
  CHECK(o.minBytes == 8);
  CHECK(o.maxBytes == 64u << 20);
  CHECK(o.methods.empty());
  CHECK(o.verify);
}

TEST_CASE("sweep options: values, suffixes and both spellings") {
  SweepOptions o;
  std::string why;
  REQUIRE(parse({"--gpus", "2", "--min-bytes=1K", "--max-bytes", "256M", "--factor", "2", "--dtype", "fp16",
                 "--mode", "graph", "--methods", "rcn-oneshot,nccl", "--json", "a.json", "--csv=b.csv",
                 "--write-policy", "p.yaml", "--trials", "7", "--graph-ops", "10", "--no-verify"},
                &o, &why));
  CHECK(o.nprocs == 2);
  CHECK(o.minBytes == 1024);
  CHECK(o.maxBytes == 256u << 20);
  CHECK(o.maxBytesGiven);
  CHECK(o.factor == 2.0);
  CHECK(o.dtype == rcnFloat16);
  CHECK(o.graph);
  CHECK_FALSE(o.eager);
  CHECK(o.methods == std::vector<std::string>{"rcn-oneshot", "nccl"});
  CHECK(o.jsonPath == "a.json");
  CHECK(o.csvPath == "b.csv");
  CHECK(o.policyPath == "p.yaml");
  CHECK(o.trials == 7);
  CHECK(o.opsPerGraph == 10);
  CHECK_FALSE(o.verify);
}

TEST_CASE("sweep options: bad input names the option") {
  SweepOptions o;
  std::string why;
  CHECK_FALSE(parse({"--dtype", "int8"}, &o, &why));
  CHECK(why.find("--dtype") != std::string::npos);
  CHECK_FALSE(parse({"--factor", "1"}, &o, &why));
  CHECK(why.find("--factor") != std::string::npos);
  CHECK_FALSE(parse({"--methods", "rcn-oneshot,bogus"}, &o, &why));
  CHECK(why.find("bogus") != std::string::npos);
  CHECK_FALSE(parse({"--min-bytes", "1M", "--max-bytes", "1K"}, &o, &why));
  CHECK(why.find("--min-bytes") != std::string::npos);
  REQUIRE(parse({"--min-bytes", "128M"}, &o, &why));  // above the default largest: that size alone
  CHECK(o.maxBytes == size_t(128) << 20);
  CHECK_FALSE(parse({"--gpus"}, &o, &why));
  CHECK(why.find("needs a value") != std::string::npos);
  CHECK_FALSE(parse({"--json", "--no-progress"}, &o, &why));  // not a file named --no-progress
  CHECK(why.find("--json needs a value, not the option --no-progress") != std::string::npos);
  CHECK(parse({"--note=--odd note"}, &o, &why));  // the inline form takes any text
  CHECK_FALSE(parse({"--frobnicate"}, &o, &why));
  CHECK(why.find("--frobnicate") != std::string::npos);
  CHECK_FALSE(parse({"--json", "out", "--csv", "out"}, &o, &why));  // one would overwrite the other
  CHECK(why.find("--json and --csv name the same file, out") != std::string::npos);
  CHECK_FALSE(parse({"--csv", "p.yaml", "--write-policy", "p.yaml"}, &o, &why));
  CHECK(parse({"--json", "a.json", "--csv", "a.csv", "--write-policy", "a.yaml"}, &o, &why));
  CHECK_FALSE(parse({"--max-bytes", "-5"}, &o, &why));
  CHECK_FALSE(parse({"--trials", "0"}, &o, &why));
  CHECK_FALSE(parse({"--trials", "1001"}, &o, &why));  // each trial is ~512 MB of messages
  CHECK(why.find("--trials") != std::string::npos);
  CHECK(parse({"--trials", "1000"}, &o, &why));
  // A factor just above 1 would list (and run) millions of sizes: listed up to the limit, then refused.
  std::vector<size_t> sizes;
  REQUIRE(parse({"--factor", "1.000000000001", "--max-bytes", "64K"}, &o, &why));
  CHECK_FALSE(listSweepSizes(o, &sizes, &why));
  CHECK(why.find("--factor 1.000000000001 from 8 to 64K gives more than 256 sizes") != std::string::npos);
  REQUIRE(parse({"--factor", "1.1", "--max-bytes", "64K"}, &o, &why));
  CHECK(listSweepSizes(o, &sizes, &why));
  CHECK(sizes == sweepSizes(8, 64 << 10, 1.1, 2));
  // Sizes that collapse into few whole elements are counted as listed, not as estimated.
  REQUIRE(parse({"--min-bytes", "4", "--max-bytes", "16", "--dtype", "fp32", "--factor", "1.0001"}, &o, &why));
  CHECK(listSweepSizes(o, &sizes, &why));
  CHECK(sizes == std::vector<size_t>{4, 8, 12, 16});
  CHECK_FALSE(parse({"--min-bytes", "1", "--max-bytes", "1"}, &o, &why));
  CHECK(why.find("no whole number of bf16 elements") != std::string::npos);
  CHECK_FALSE(parse({"--min-bytes", "6", "--max-bytes", "7", "--dtype", "fp32"}, &o, &why));
  CHECK(parse({"--min-bytes", "6", "--max-bytes", "8", "--dtype", "fp32"}, &o, &why));
  CHECK(parse({"--min-bytes", "1", "--max-bytes", "2"}, &o, &why));
  CHECK_FALSE(parse({"--no-verify=0"}, &o, &why));
  CHECK(why.find("takes no value") != std::string::npos);
  CHECK_FALSE(parse({"--json", ""}, &o, &why));
  CHECK(why.find("--json") != std::string::npos);
  CHECK_FALSE(parse({"--methods", ",,"}, &o, &why));
  CHECK(why.find("no method") != std::string::npos);
}

TEST_CASE("sweep sizes: geometric, whole elements, strictly increasing") {
  CHECK(sweepSizes(8, 64, 2, 2) == std::vector<size_t>{8, 16, 32, 64});
  CHECK(sweepSizes(1024, 1 << 20, 4, 2) ==
        std::vector<size_t>{1024, 4096, 16384, 65536, 262144, 1048576});
  // 8 B .. 256 MB by 2: 26 sizes, the last 256 MB.
  std::vector<size_t> full = sweepSizes(8, 256u << 20, 2, 2);
  CHECK(full.size() == 26);
  CHECK(full.back() == 256u << 20);
  // Sizes round down to whole fp32 elements and never drop below one element.
  CHECK(sweepSizes(2, 10, 2, 4) == std::vector<size_t>{4, 8});
  CHECK(sweepSizes(6, 8, 4, 4) == std::vector<size_t>{8});  // 6 is not whole elements: up, not down to 4
  // A small factor never repeats a size.
  std::vector<size_t> fine = sweepSizes(8, 64, 1.1, 2);
  for (size_t i = 1; i < fine.size(); ++i) CHECK(fine[i] > fine[i - 1]);
  CHECK(sweepSizes(64, 8, 2, 2).empty());
}

TEST_CASE("sweep formatBytes and dtype names") {
  CHECK(formatBytes(8) == "8");
  CHECK(formatBytes(1024) == "1K");
  CHECK(formatBytes(64u << 20) == "64M");
  CHECK(formatBytes(1536) == "1536");
  rcnDataType_t t;
  CHECK(parseDtype("bf16", &t));
  CHECK(t == rcnBfloat16);
  CHECK(parseDtype("float", &t));
  CHECK(t == rcnFloat32);
  CHECK_FALSE(parseDtype("fp8", &t));
  CHECK(std::string(dtypeShortName(rcnFloat16)) == "fp16");
}

TEST_CASE("sweep stats: median, quartiles, extremes, worst rank") {
  TimeStats s = summarize({5, 1, 3, 2, 4});
  CHECK(s.median == 3);
  CHECK(s.min == 1);
  CHECK(s.max == 5);
  CHECK(s.q1 == 2);
  CHECK(s.q3 == 4);
  CHECK(s.samples == 5);
  TimeStats even = summarize({1, 2, 3, 4});
  CHECK(even.median == Catch::Approx(2.5));
  CHECK(even.q1 == Catch::Approx(1.75));
  CHECK(summarize({}).samples == 0);
  TimeStats a = summarize({1, 2, 3}), b = summarize({2, 3, 9});
  TimeStats w = worstOf({a, b});
  CHECK(w.median == 3);
  CHECK(w.max == 9);
  CHECK(w.min == 2);
}

TEST_CASE("sweep plan: rotation, repeats and graphs are rank-invariant and cover every slot") {
  const size_t pool = 128u << 20;
  PointPlan small = planPoint(1024, 2, pool, 20, true);
  CHECK(small.count == 512);
  CHECK(small.stride == kSlotAlign);
  CHECK(small.slots == kMaxSlots);
  CHECK(small.opsPerTrial == 200);
  CHECK(small.opsPerTrial % small.opsPerGraph == 0);
  CHECK(static_cast<size_t>(small.graphs * small.opsPerGraph) >= small.slots);
  // 1 MB: 128 slots = the whole 128 MB pool, more than an H200's 60 MB L2.
  PointPlan mid = planPoint(1u << 20, 2, pool, 20, true);
  CHECK(mid.slots * mid.stride == pool);
  PointPlan big = planPoint(256u << 20, 2, 256u << 20, 20, true);
  CHECK(big.slots == 1);
  CHECK(big.opsPerTrial == 20);
  CHECK(big.graphs == 1);
  PointPlan host = planPoint(4096, 4, pool, 20, false);
  CHECK(host.slots == 1);
  // Every slot is used by some graph op.
  std::vector<bool> used(small.slots, false);
  for (int g = 0; g < small.graphs; ++g)
    for (int j = 0; j < small.opsPerGraph; ++j) used[slotOf(small, g, j)] = true;
  for (bool u : used) CHECK(u);
}
