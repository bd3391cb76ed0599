// SPDX-License-Identifier: BSD-3-Clause
// allreduce_sweep's launch variables: which launcher started this process,
// and the hex form of the id it hands to the ranks it starts.
#include <catch2/catch_test_macros.hpp>

#include <map>
#include <string>
#include <vector>

#include "core/strings.h"
#include "sweep_launch.h"

using namespace rcn;
using namespace rcn::bench;

namespace {

EnvLookup envOf(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("launch env: nothing set is a standalone run") {
  LaunchInfo info;
  std::string why;
  REQUIRE(parseLaunchEnv(envOf({}), &info, &why));
  CHECK(info.kind == LaunchKind::Standalone);
  CHECK(info.rank == 0);
}

TEST_CASE("launch env: torchrun variables") {
  LaunchInfo info;
  std::string why;
  REQUIRE(parseLaunchEnv(envOf({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "1234"}}),
                         &info, &why));
  CHECK(info.kind == LaunchKind::External);
  CHECK(info.source == "torchrun");
  CHECK(info.rank == 3);
  CHECK(info.nranks == 4);
  CHECK(info.localRank == 1);
  CHECK(info.masterAddr == "node0");
  CHECK(info.masterPort == 1234);
}

TEST_CASE("launch env: OpenMPI, PMI and Slurm equivalents") {
  LaunchInfo info;
  std::string why;
  REQUIRE(parseLaunchEnv(envOf({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}}),
                         &info, &why));
  CHECK(info.source == "OpenMPI");
  CHECK(info.localRank == 1);
  CHECK(info.masterPort == kDefaultMasterPort);

  REQUIRE(parseLaunchEnv(envOf({{"PMI_RANK", "0"}, {"PMI_SIZE", "8"}, {"PMI_LOCAL_RANK", "0"},
                                {"MASTER_ADDR", "h"}}),
                         &info, &why));
  CHECK(info.source == "PMI");
  CHECK(info.nranks == 8);
  CHECK(info.localRank == 0);

  REQUIRE(parseLaunchEnv(envOf({{"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "6"}, {"SLURM_NTASKS", "12"},
                                {"SLURM_LOCALID", "1"}, {"MASTER_ADDR", "h"}}),
                         &info, &why));
  CHECK(info.source == "Slurm");
  CHECK(info.rank == 5);
  CHECK(info.nranks == 6);
  // A batch script (SLURM_NTASKS without a step) is one process, not a launch.
  REQUIRE(parseLaunchEnv(envOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}), &info, &why));
  CHECK(info.kind == LaunchKind::Standalone);
  // Under torchrun's agent store the rendezvous takes MASTER_PORT + 1.
  REQUIRE(parseLaunchEnv(envOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
                                {"TORCHELASTIC_USE_AGENT_STORE", "True"}}),
                         &info, &why));
  CHECK(info.masterPort == 29501);
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                    {"MASTER_PORT", "65535"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}),
                             &info, &why));
  CHECK(why.find("MASTER_PORT + 1") != std::string::npos);
  // Without a local rank the sweep derives it from host names later.
  REQUIRE(parseLaunchEnv(envOf({{"RANK", "0"}, {"WORLD_SIZE", "1"}}), &info, &why));
  CHECK(info.localRank == -1);
}

TEST_CASE("launch env: inconsistent variables are clear errors") {
  LaunchInfo info;
  std::string why;
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}), &info, &why));
  CHECK(why.find("RANK") != std::string::npos);
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "x"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}), &info, &why));
  CHECK(why.find("RANK='x'") != std::string::npos);
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}}), &info, &why));
  CHECK(why.find("MASTER_ADDR") != std::string::npos);
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                             &info, &why));
  CHECK(why.find("MASTER_PORT") != std::string::npos);
  CHECK_FALSE(parseLaunchEnv(envOf({{kEnvRank, "1"}, {kEnvNranks, "2"}}), &info, &why));
  CHECK(why.find(kEnvId) != std::string::npos);
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "5"}}), &info, &why));
  CHECK(why.find("LOCAL_RANK=5 is not below WORLD_SIZE=1") != std::string::npos);
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "0"}, {"WORLD_SIZE", "100000000"}, {"MASTER_ADDR", "h"}}), &info, &why));
  CHECK(why.find("more than the 1048576 ranks") != std::string::npos);
  // Spaces around a number count alike on both sides; a sign or a gap inside does not parse.
  REQUIRE(parseLaunchEnv(envOf({{"RANK", " 1"}, {"WORLD_SIZE", "2 "}, {"MASTER_ADDR", "h"}}), &info, &why));
  CHECK(info.rank == 1);
  CHECK(info.nranks == 2);
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "+1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), &info, &why));
  CHECK(why.find("RANK='+1'") != std::string::npos);
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "1 0"}, {"WORLD_SIZE", "20"}, {"MASTER_ADDR", "h"}}), &info, &why));
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "0"}, {"WORLD_SIZE", " "}, {"MASTER_ADDR", "h"}}), &info, &why));
  CHECK_FALSE(parseLaunchEnv(envOf({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}, {"MASTER_ADDR", "h"}}), &info, &why));
  // A rank variable alone is no launcher, and the hint says what is missing (not for a Slurm batch script).
  REQUIRE(parseLaunchEnv(envOf({{"RANK", "1"}}), &info, &why));
  CHECK(info.kind == LaunchKind::Standalone);
  CHECK(partialLauncherVars(envOf({{"RANK", "1"}})) == " (RANK is set without WORLD_SIZE)");
  CHECK(partialLauncherVars(envOf({{"SLURM_PROCID", "0"}})).empty());
}

TEST_CASE("launch env: a rank started by the sweep itself") {
  LaunchInfo info;
  std::string why;
  REQUIRE(parseLaunchEnv(envOf({{kEnvRank, "1"}, {kEnvNranks, "2"}, {kEnvId, "00ff"}, {"RANK", "7"}}), &info, &why));
  CHECK(info.kind == LaunchKind::LocalChild);  // our own variables win over a surrounding launcher's
  CHECK(info.rank == 1);
  CHECK(info.localRank == 1);
  CHECK(info.idHex == "00ff");
}

TEST_CASE("launch env: hex round trip") {
  unsigned char bytes[] = {0x00, 0x01, 0xab, 0xff, 0x7f};
  std::string hex = toHex(bytes, sizeof bytes);
  CHECK(hex == "0001abff7f");
  std::vector<unsigned char> back;
  REQUIRE(fromHex(hex, &back));
  CHECK(back == std::vector<unsigned char>(bytes, bytes + sizeof bytes));
  CHECK(fromHex("ABff", &back));
  CHECK_FALSE(fromHex("abc", &back));
  CHECK_FALSE(fromHex("zz", &back));
}
