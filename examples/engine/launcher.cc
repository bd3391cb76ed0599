#include "launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "checkpoint.h"
#include "model.h"
#include "rcn_result.h"
#include "shapes.h"
#include "shard.h"

namespace engine {

void adoptExternalLaunch(EngineOptions& o) {
  if (o.rank >= 0) return;  // started by launchRanks below, which passes --rank
  rcnLaunchInfo launch{};
  const rcnResult_t res = rcnGetLaunchInfo(&launch);
  if (res == rcnInvalidUsage) return;  // no launcher
  if (res != rcnSuccess) throw EngineError(std::string("launcher variables: ") + rcnGetLastError(nullptr));
  if (launch.nranks == 1 && o.tp > 1) return;
  if (o.tpGiven && o.tp != launch.nranks)
    throw EngineError("--tp " + std::to_string(o.tp) + " but " + launch.source + " started " +
                      std::to_string(launch.nranks) + " ranks: leave --tp out or make it the world size");
  o.externalLaunch = true;
  o.tp = launch.nranks;
  o.rank = launch.rank;
  o.localRank = launch.localRank;
}

rcnComm_t joinComm(const EngineOptions& o, int rank) {
  rcnComm_t comm = nullptr;
  if (o.externalLaunch) {
    rcnCheck(rcnCommInitFromLaunch(&comm), "rcnCommInitFromLaunch");
  } else {
    rcnUniqueId id;
    fromHex(o.uniqueIdHex, &id, sizeof id);
    rcnCheck(rcnCommInitRank(&comm, o.tp, id, rank), "rcnCommInitRank");
  }
  return comm;
}

std::string toHex(const void* data, size_t bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned char b = static_cast<const unsigned char*>(data)[i];
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

void fromHex(const std::string& hex, void* data, size_t bytes) {
  if (hex.size() != 2 * bytes) throw EngineError("--unique-id must be " + std::to_string(2 * bytes) + " hex digits");
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw EngineError(std::string("--unique-id: bad hex digit '") + c + "'");
  };
  for (size_t i = 0; i < bytes; ++i)
    static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
}

// The model splits over the ranks (planShard), checked before any is
// started, so that a --tp it cannot take fails at once, not in every rank.
void requireSplits(const EngineOptions& o) {
  const ModelConfig config = o.randomWeights ? shapeConfig(o.shape) : checkpointConfig(o.modelPath);
  planShard(config, o.tp, 0);
}

int launchRanks(const EngineOptions& o, int argc, char** argv, const std::string& uniqueIdHex) {
  requireSplits(o);
  const int ranks = o.tp;
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> args(argv, argv + argc);
    args.push_back("--rank");
    args.push_back(std::to_string(r));
    args.push_back("--unique-id");
    args.push_back(uniqueIdHex);
    pid_t pid = fork();
    if (pid < 0) throw EngineError("fork failed for rank " + std::to_string(r));
    if (pid == 0) {
      std::vector<char*> cargs;
      for (std::string& a : args) cargs.push_back(&a[0]);
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      std::perror("rcn_engine: execv /proc/self/exe");
      _exit(127);
    }
    children.push_back(pid);
  }

  const auto grace = std::chrono::seconds(30);
  std::vector<bool> running(ranks, true);
  int result = 0, alive = ranks;
  std::chrono::steady_clock::time_point firstFailure;
  while (alive > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < ranks; ++r) {
        if (children[r] != pid) continue;
        running[r] = false;
        --alive;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && result == 0) {
          result = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
          firstFailure = std::chrono::steady_clock::now();
          std::fprintf(stderr, "rcn_engine: rank %d %s %d\n", r, WIFEXITED(status) ? "exited with" : "killed by signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        }
      }
      continue;
    }
    if (result != 0 && std::chrono::steady_clock::now() - firstFailure > grace) {
      for (int r = 0; r < ranks; ++r)
        if (running[r]) {
          std::fprintf(stderr, "rcn_engine: killing rank %d, still running after another rank failed\n", r);
          kill(children[r], SIGKILL);
        }
      firstFailure = std::chrono::steady_clock::now();  // reap them next
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace engine
