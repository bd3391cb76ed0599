// SPDX-License-Identifier: BSD-3-Clause
// The public API for processes started by a launcher (rcnGetLaunchInfo,
// rcnCommInitFromLaunch) on the host backend: two forked ranks with
// torchrun's variables join over MASTER_ADDR:MASTER_PORT and all-reduce host
// buffers against a float64 reference; missing or wrong variables, a taken
// port and an absent rank 0 give named, bounded errors.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/auth.h"
#include "core/socket.h"
#include "support/free_port.h"
#include "support/multiproc.h"
#include "support/rank_checks.h"
#include "support/scoped_env.h"
#include "support/temp_file.h"
#include "test_host_util.h"

using namespace rcn;
using namespace rcn::test;

namespace {

std::string lastError() { return rcnGetLastError(nullptr); }

// Every variable a launcher sets, cleared for the scope so that the test
// machine's own (a CI job under Slurm) cannot leak in.
class NoLauncher {
 public:
  NoLauncher() {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
                             "PMI_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS",
                             "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "RCNBENCH_RANK", "RCNBENCH_NRANKS",
                             "RCNBENCH_ID", "TORCHELASTIC_USE_AGENT_STORE"})
      cleared_.push_back(std::make_unique<ScopedEnv>(name, nullptr));
  }

 private:
  std::vector<std::unique_ptr<ScopedEnv>> cleared_;
};

// The variables torchrun sets for a world of `size` ranks on this machine (but
// RANK and LOCAL_RANK, each rank's own), on the host backend, rank 0 serving
// the id on a free MASTER_PORT.
class TorchrunWorld {
 public:
  TorchrunWorld(int size, const char* bootstrapTimeoutMs)
      : port(freePort()),
        backend_("ROCENANTE_BACKEND", "host"),
        size_("WORLD_SIZE", std::to_string(size).c_str()),
        addr_("MASTER_ADDR", "127.0.0.1"),
        port_("MASTER_PORT", std::to_string(port).c_str()),
        timeout_("ROCENANTE_BOOTSTRAP_TIMEOUT_MS", bootstrapTimeoutMs) {}

  const int port;

 private:
  NoLauncher clean_;
  ScopedEnv backend_, size_, addr_, port_, timeout_;
};

// One rank: learns its place from the variables, joins, all-reduces.
int runRank(int rank, int nranks) {
  const std::string rankText = std::to_string(rank);
  setenv("RANK", rankText.c_str(), 1);
  setenv("LOCAL_RANK", rankText.c_str(), 1);
  rcnLaunchInfo launch{};
  RANK_EXPECT(rcnGetLaunchInfo(&launch) == rcnSuccess);
  RANK_CHECK(launch.rank == rank && launch.nranks == nranks && launch.localRank == rank &&
                 std::string(launch.source) == "torchrun",
             "launch info: rank %d of %d, local %d, source '%s'", launch.rank, launch.nranks, launch.localRank,
             launch.source);
  rcnComm_t comm = nullptr;
  RANK_CHECK(rcnCommInitFromLaunch(&comm) == rcnSuccess, "rcnCommInitFromLaunch: %s", lastError().c_str());
  rcnCommInfo info{};
  RANK_EXPECT(rcnCommQuery(comm, &info) == rcnSuccess);
  RANK_CHECK(info.rank == rank && info.nranks == nranks && info.path == rcnPathHost && info.cudaDev == -1,
             "comm: rank %d of %d, path %d, device %d", info.rank, info.nranks, info.path, info.cudaDev);
  int failures = 0;
  uint64_t seed = 7000;
  for (size_t count : {size_t(3), size_t(4099), size_t(100000)}) {
    for (rcnDataType_t type : {rcnFloat32, rcnBfloat16}) {
      ++seed;
      std::vector<uint8_t> in = rankInput(seed, rank, nranks, count, type, rcnSum);
      std::vector<uint8_t> out(in.size(), kPoisonByte);
      RANK_EXPECT(rcnAllReduce(in.data(), out.data(), count, type, rcnSum, comm, nullptr) == rcnSuccess);
      failures += checkAgainstReference(out.data(), seed, nranks, count, type, rcnSum, "launch") != 0;
    }
  }
  RANK_EXPECT(rcnCommDestroy(comm) == rcnSuccess);
  return failures;
}

}  // namespace

TEST_CASE("two torchrun-style ranks join through MASTER_ADDR:MASTER_PORT", "[host][api][launch]") {
  TorchrunWorld world(2, "20000");
  checkRanks(runRanks(2, [](int rank) { return runRank(rank, 2); }, 60));
}

TEST_CASE("the other launchers' variables are read", "[api][launch]") {
  NoLauncher clean;
  rcnLaunchInfo info{};
  {
    ScopedEnv r("OMPI_COMM_WORLD_RANK", "3"), n("OMPI_COMM_WORLD_SIZE", "4"), l("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    ScopedEnv addr("MASTER_ADDR", "node0");
    REQUIRE(rcnGetLaunchInfo(&info) == rcnSuccess);
    CHECK((info.rank == 3 && info.nranks == 4 && info.localRank == 1));
    CHECK(std::string(info.source) == "OpenMPI");
  }
  {
    ScopedEnv r("SLURM_PROCID", "0"), n("SLURM_STEP_NUM_TASKS", "1");
    REQUIRE(rcnGetLaunchInfo(&info) == rcnSuccess);
    CHECK((info.rank == 0 && info.nranks == 1 && info.localRank == -1));
    CHECK(std::string(info.source) == "Slurm");
  }
  {
    // A batch script's own environment (no srun step) is not a launch.
    ScopedEnv r("SLURM_PROCID", "0"), n("SLURM_NTASKS", "4");
    CHECK(rcnGetLaunchInfo(&info) == rcnInvalidUsage);
  }
}

TEST_CASE("missing or wrong launcher variables are named", "[api][launch]") {
  NoLauncher clean;
  rcnLaunchInfo info{};
  rcnComm_t comm = reinterpret_cast<rcnComm_t>(0x1);
  CHECK(rcnGetLaunchInfo(nullptr) == rcnInvalidArgument);
  CHECK(rcnCommInitFromLaunch(nullptr) == rcnInvalidArgument);

  info.nranks = 5;
  CHECK(rcnGetLaunchInfo(&info) == rcnInvalidUsage);
  CHECK(info.nranks == 0);
  CHECK(rcnCommInitFromLaunch(&comm) == rcnInvalidUsage);
  CHECK(comm == nullptr);
  CHECK(lastError().find("no launcher variables") != std::string::npos);
  CHECK(lastError().find("WORLD_SIZE") != std::string::npos);

  ScopedEnv addr("MASTER_ADDR", "127.0.0.1");
  {
    ScopedEnv r("RANK", "2"), n("WORLD_SIZE", "2");
    CHECK(rcnGetLaunchInfo(&info) == rcnInvalidArgument);
    CHECK(lastError().find("RANK=2 is not a rank of WORLD_SIZE=2") != std::string::npos);
    CHECK(rcnCommInitFromLaunch(&comm) == rcnInvalidArgument);
  }
  {
    ScopedEnv r("RANK", "one"), n("WORLD_SIZE", "2");
    CHECK(rcnGetLaunchInfo(&info) == rcnInvalidArgument);
    CHECK(lastError().find("RANK='one'") != std::string::npos);
  }
  ScopedEnv r("RANK", "1"), n("WORLD_SIZE", "2");
  for (const char* badPort : {"70000", "0", "http"}) {
    ScopedEnv port("MASTER_PORT", badPort);
    CHECK(rcnGetLaunchInfo(&info) == rcnInvalidArgument);
    CHECK(lastError().find("MASTER_PORT") != std::string::npos);
    CHECK(rcnCommInitFromLaunch(&comm) == rcnInvalidArgument);
    CHECK(comm == nullptr);
  }
  {
    ScopedEnv noAddr("MASTER_ADDR", nullptr);
    CHECK(rcnGetLaunchInfo(&info) == rcnInvalidArgument);
    CHECK(lastError().find("without MASTER_ADDR") != std::string::npos);
  }
}

TEST_CASE("a taken MASTER_PORT or an absent rank 0 fails within the timeout", "[host][api][launch]") {
  NoLauncher clean;
  ScopedEnv backend("ROCENANTE_BACKEND", "host");
  ScopedEnv timeout("ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "500");
  ScopedEnv addr("MASTER_ADDR", "127.0.0.1"), n("WORLD_SIZE", "2");
  rcnComm_t comm = nullptr;

  // Another program listens on the port rank 0 was told to use.
  int other = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(other >= 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof any;
  REQUIRE(bind(other, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0);
  REQUIRE(listen(other, 1) == 0);
  REQUIRE(getsockname(other, reinterpret_cast<sockaddr*>(&any), &len) == 0);
  const std::string taken = std::to_string(ntohs(any.sin_port));
  {
    ScopedEnv r("RANK", "0"), port("MASTER_PORT", taken.c_str());
    CHECK(rcnCommInitFromLaunch(&comm) == rcnSystemError);
    CHECK(comm == nullptr);
    CHECK(lastError().find("cannot listen on port " + taken) != std::string::npos);
  }
  close(other);

  // Rank 1 alone: nobody serves the id, so it gives up after the timeout.
  const std::string port = std::to_string(freePort());
  ScopedEnv r("RANK", "1"), masterPort("MASTER_PORT", port.c_str());
  const auto start = std::chrono::steady_clock::now();
  CHECK(rcnCommInitFromLaunch(&comm) != rcnSuccess);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(comm == nullptr);
  CHECK(seconds < 10);
  CHECK(lastError().find("cannot get the id from rank 0") != std::string::npos);
}

namespace {

SocketAddress loopbackPort(int port) {
  SocketAddress where;
  auto* in = reinterpret_cast<sockaddr_in*>(&where.storage);
  in->sin_family = AF_INET;
  in->sin_port = htons(static_cast<uint16_t>(port));
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  where.len = sizeof(sockaddr_in);
  return where;
}

// Connects to 127.0.0.1:port (retrying while rank 0 starts listening), proves
// `key` and sends what a rank sends to join: rank, world size. The socket,
// or -1 when rank 0 refused the proof or could not be reached.
int joinAs(int port, int32_t rank, int32_t nranks, const AuthKey& key = AuthKey{}) {
  int fd = -1;
  std::string why;
  const int32_t join[2] = {rank, nranks};
  if (socketConnect(loopbackPort(port), deadlineAfterMs(10000), &fd, &why) != rcnSuccess) return -1;
  if (authConnect(fd, key, "rendezvous", join, sizeof join, deadlineAfterMs(10000), &why) != rcnSuccess)
    socketClose(&fd);
  return fd;
}

// Rank 0's answer's refusal field (its first), or -1.
int32_t refusalOf(int fd) {
  int32_t refusal = -1;
  std::string why;
  return socketRecvAll(fd, &refusal, sizeof refusal, deadlineAfterMs(10000), &why) == rcnSuccess ? refusal : -1;
}

}  // namespace

TEST_CASE("MASTER_PORT refuses a join as a rank outside the world", "[host][api][launch]") {
  TorchrunWorld world(2, "20000");
  checkRanks(runRanks(2, [&](int rank) {
    if (rank == 1) {
      // A stray process claims rank 5 of 2 first: refused, and it does not
      // count, so the real rank 1 still joins (then the sums are checked).
      const int stray = joinAs(world.port, 5, 2);
      RANK_EXPECT(stray >= 0);
      RANK_CHECK(refusalOf(stray) == 2, "rank 5 of 2 was not refused as out of range");
      close(stray);
    }
    return runRank(rank, 2);
  }, 60));
}

TEST_CASE("MASTER_PORT: a second process joining as a rank that joined is told so", "[host][api][launch]") {
  TorchrunWorld world(3, "3000");
  checkRanks(runRanks(3, [&](int rank) {
    rcnComm_t comm = nullptr;
    setenv("RANK", std::to_string(rank).c_str(), 1);
    if (rank == 2) return 0;  // never joins: rank 0 serves the id until its timeout, whatever the timing
    if (rank == 0) {  // the first "rank 1" took the id and left: rank 0 gives up after the timeout
      RANK_EXPECT(rcnCommInitFromLaunch(&comm) != rcnSuccess);
      return 0;
    }
    const int first = joinAs(world.port, 1, 3);  // another launch's rank 1, say
    RANK_EXPECT(first >= 0);
    RANK_CHECK(refusalOf(first) == 0, "the first rank 1 was refused");
    close(first);
    RANK_EXPECT(rcnCommInitFromLaunch(&comm) == rcnInvalidUsage);
    RANK_CHECK(lastError().find("another process joined as that rank first") != std::string::npos,
               "rank 1's error: %s", lastError().c_str());
    return 0;
  }, 60));
}

namespace {

constexpr const char* kLaunchKey = "a launch key of 32 random bytes!";

// Connects to host:port and says nothing, once rank 0 listens; -1 if it never does.
int silentConnection(const char* host, int port) {
  SocketAddress where = loopbackPort(port);
  inet_pton(AF_INET, host, &reinterpret_cast<sockaddr_in*>(&where.storage)->sin_addr);
  int fd = -1;
  std::string why;
  return socketConnect(where, deadlineAfterMs(10000), &fd, &why) == rcnSuccess ? fd : -1;
}

}  // namespace

TEST_CASE("MASTER_PORT with ROCENANTE_BOOTSTRAP_KEY: strangers take no rank, the ranks join",
          "[host][api][launch][auth]") {
  // The attack without a key: a stranger that reaches MASTER_PORT first is
  // handed the id as rank 1 (the case above). With a key, one without it
  // or with another is turned away and learns nothing; the real ranks,
  // rank 0 reading the key from a file, join and sum exactly.
  TorchrunWorld world(2, "20000");
  TempFile keyFile(std::string(kLaunchKey) + "\n");
  chmod(keyFile.path().c_str(), 0600);
  checkRanks(runRanks(
      2,
      [&](int rank) {
        if (rank == 0) {
          setenv("ROCENANTE_BOOTSTRAP_KEY_FILE", keyFile.path().c_str(), 1);
          return runRank(0, 2);
        }
        RANK_CHECK(joinAs(world.port, 1, 2) < 0, "a stranger without the key got an answer");
        RANK_CHECK(joinAs(world.port, 1, 2, AuthKey{"another launch's key, 32 bytes.."}) < 0,
                   "a stranger with another key got an answer");
        setenv("ROCENANTE_BOOTSTRAP_KEY", kLaunchKey, 1);
        return runRank(1, 2);
      },
      60));
}

TEST_CASE("MASTER_PORT: a rank with another key fails, naming the variable", "[host][api][launch][auth]") {
  TorchrunWorld world(2, "2000");
  checkRanks(runRanks(
      2,
      [&](int rank) {
        setenv("RANK", std::to_string(rank).c_str(), 1);
        setenv("ROCENANTE_BOOTSTRAP_KEY", rank == 0 ? kLaunchKey : "not the launch's key, 32 bytes..", 1);
        rcnComm_t comm = nullptr;
        RANK_EXPECT(rcnCommInitFromLaunch(&comm) != rcnSuccess);
        if (rank == 1)
          RANK_CHECK(lastError().find("ROCENANTE_BOOTSTRAP_KEY differs between the ranks") != std::string::npos,
                     "rank 1's error: %s", lastError().c_str());
        return 0;
      },
      60));
}

TEST_CASE("MASTER_PORT: a key too short, or set twice, is refused by name", "[api][launch][auth]") {
  TorchrunWorld world(2, "2000");
  ScopedEnv rank("RANK", "0");
  rcnComm_t comm = nullptr;
  {
    ScopedEnv key("ROCENANTE_BOOTSTRAP_KEY", "hunter2");
    CHECK(rcnCommInitFromLaunch(&comm) == rcnInvalidArgument);
    CHECK(lastError().find("ROCENANTE_BOOTSTRAP_KEY holds 7 bytes") != std::string::npos);
  }
  {
    ScopedEnv key("ROCENANTE_BOOTSTRAP_KEY", kLaunchKey), file("ROCENANTE_BOOTSTRAP_KEY_FILE", "/nonexistent");
    CHECK(rcnCommInitFromLaunch(&comm) == rcnInvalidArgument);
    CHECK(lastError().find("both set") != std::string::npos);
  }
  {
    ScopedEnv file("ROCENANTE_BOOTSTRAP_KEY_FILE", "/nonexistent/key");
    CHECK(rcnCommInitFromLaunch(&comm) == rcnInvalidArgument);
    CHECK(lastError().find("/nonexistent/key") != std::string::npos);
  }
  CHECK(comm == nullptr);
}

TEST_CASE("MASTER_PORT: 30 silent connections do not fail the launch", "[host][api][launch][auth]") {
  // Each used to cost rank 0 two seconds, one after another: 30 of them
  // outlasted a 20 s timeout. Heard concurrently, they cost nothing.
  TorchrunWorld world(2, "20000");
  checkRanks(runRanks(
      2,
      [&](int rank) {
        std::vector<int> silent;
        if (rank == 1)
          for (int i = 0; i < 30; ++i) silent.push_back(silentConnection("127.0.0.1", world.port));
        const int failures = runRank(rank, 2);
        for (int fd : silent) close(fd);
        return failures;
      },
      60));
}

TEST_CASE("MASTER_PORT: rank 0 listens on MASTER_ADDR's address, not on every interface", "[host][api][launch][auth]") {
  // 127.0.0.2 reaches this host as 127.0.0.1 does; a socket bound to every
  // interface would answer there too.
  TorchrunWorld world(2, "20000");
  checkRanks(runRanks(
      2,
      [&](int rank) {
        if (rank == 1) {
          const int up = silentConnection("127.0.0.1", world.port);  // rank 0 listens now
          RANK_EXPECT(up >= 0);
          int other = socket(AF_INET, SOCK_STREAM, 0);
          sockaddr_in elsewhere{};
          elsewhere.sin_family = AF_INET;
          elsewhere.sin_port = htons(static_cast<uint16_t>(world.port));
          inet_pton(AF_INET, "127.0.0.2", &elsewhere.sin_addr);
          RANK_CHECK(connect(other, reinterpret_cast<sockaddr*>(&elsewhere), sizeof elsewhere) != 0,
                     "rank 0's rendezvous answered on 127.0.0.2: it listens on every interface");
          close(other);
          close(up);
        }
        return runRank(rank, 2);
      },
      60));
}
