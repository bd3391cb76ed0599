// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_world.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

#include "core/bootstrap_env.h"
#include "rocenante/rocenante.h"

#include "core/strings.h"

namespace rcn::bench {
namespace {

std::atomic<bool> gChildrenDone{false};

// Starts rank `rank` as a copy of this program. The child dies with its
// parent. Everything is prepared before fork: between fork and exec only
// async-signal-safe calls are allowed (the bootstrap's thread may hold locks).
pid_t spawnRank(char** argv, int rank, int nranks, const std::string& idHex) {
  std::vector<std::string> vars = {std::string(kEnvRank) + "=" + std::to_string(rank),
                                   std::string(kEnvNranks) + "=" + std::to_string(nranks),
                                   std::string(kEnvId) + "=" + idHex};
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    for (const char* ours : {kEnvRank, kEnvNranks, kEnvId})
      if (entry.rfind(std::string(ours) + "=", 0) == 0) entry.clear();
    if (!entry.empty()) vars.push_back(entry);
  }
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  static const char kExecFailed[] = "allreduce_sweep: exec of /proc/self/exe failed\n";
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  execve("/proc/self/exe", argv, envp.data());
  ssize_t ignored = write(2, kExecFailed, sizeof kExecFailed - 1);
  (void)ignored;
  _exit(127);
}

std::string exitText(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

// While the sweep runs, a rank that dies would leave the others waiting for
// it until their timeouts: stop the whole run at once and say which one. The
// watcher only peeks (WNOWAIT); reapChildren collects the exit statuses.
void watchChildren(std::vector<pid_t> children) {
  std::thread([children]() {
    std::vector<bool> finished(children.size(), false);
    while (!gChildrenDone.load()) {
      for (size_t i = 0; i < children.size(); ++i) {
        siginfo_t info{};
        if (finished[i] || waitid(P_PID, children[i], &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
            info.si_pid != children[i] || gChildrenDone.load())
          continue;
        finished[i] = true;
        if (info.si_code == CLD_EXITED && info.si_status == 0) continue;  // done, cleanly
        std::fprintf(stderr, "allreduce_sweep: rank %zu (pid %d) %s %d before the sweep ended; "
                     "stopping all ranks\n", i + 1, children[i],
                     info.si_code == CLD_EXITED ? "exited with status" : "was killed by signal", info.si_status);
        for (pid_t other : children)
          if (other != children[i]) kill(other, SIGTERM);
        _exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }).detach();
}

rcnResult_t startLocalRanks(int nprocs, char** argv, World* world, std::string* why) {
  rcnUniqueId id;
  rcnResult_t res = bootstrapGetUniqueId(&id);
  if (res != rcnSuccess) {
    *why = "could not open the bootstrap socket for the local ranks";
    return res;
  }
  std::string hex = toHex(&id, sizeof id);
  for (int r = 1; r < nprocs; ++r) {
    pid_t pid = spawnRank(argv, r, nprocs, hex);
    if (pid < 0) {
      const int err = errno;  // read before the text allocates
      *why = std::string("fork failed: ") + strerror(err);
      for (pid_t started : world->children) kill(started, SIGTERM);
      return rcnSystemError;
    }
    world->children.push_back(pid);
  }
  watchChildren(world->children);
  res = bootstrapInitTcp(id, 0, nprocs, &world->bootstrap);
  if (res != rcnSuccess) *why = "rank 0 could not join the bootstrap of the local ranks";
  return res;
}

rcnResult_t joinAsChild(const LaunchInfo& launch, World* world, std::string* why) {
  std::vector<unsigned char> bytes;
  if (!fromHex(launch.idHex, &bytes) || bytes.size() != sizeof(rcnUniqueId)) {
    *why = std::string(kEnvId) + " does not hold a " + std::to_string(sizeof(rcnUniqueId)) + "-byte hex id";
    return rcnInvalidArgument;
  }
  rcnUniqueId id;
  std::memcpy(&id, bytes.data(), sizeof id);
  rcnResult_t res = bootstrapInitTcp(id, launch.rank, launch.nranks, &world->bootstrap);
  if (res != rcnSuccess) *why = "could not join rank 0's bootstrap";
  return res;
}

// Who shares this host: the local rank is the count of lower ranks with the
// same host name, unless the launcher said otherwise.
rcnResult_t placeOnHosts(World* world, std::string* why) {
  struct Name { char text[64]; };
  Name mine{};
  gethostname(mine.text, sizeof mine.text - 1);
  world->hostname = mine.text;
  std::vector<Name> names;
  rcnResult_t res = gatherAll(world->bootstrap.get(), mine, &names);
  if (res != rcnSuccess) {
    *why = "exchanging host names failed";
    return res;
  }
  std::vector<std::string> distinct;
  int below = 0, same = 0;
  for (int r = 0; r < world->nranks; ++r) {
    std::string name = names[r].text;
    bool seen = false;
    for (const std::string& d : distinct) seen |= d == name;
    if (!seen) distinct.push_back(name);
    if (name == world->hostname) {
      ++same;
      if (r < world->rank) ++below;
    }
  }
  world->nnodes = static_cast<int>(distinct.size());
  world->localRanks = same;
  world->localRank = world->launch.localRank >= 0 ? world->launch.localRank : below;
  return rcnSuccess;
}

}  // namespace

rcnResult_t joinWorld(const LaunchInfo& launch, int nprocs, char** argv, World* world, std::string* why) {
  world->launch = launch;
  rcnResult_t res = rcnSuccess;
  switch (launch.kind) {
    case LaunchKind::Standalone:
      world->rank = 0;
      world->nranks = nprocs;
      res = startLocalRanks(nprocs, argv, world, why);
      break;
    case LaunchKind::LocalChild:
      world->rank = launch.rank;
      world->nranks = launch.nranks;
      res = joinAsChild(launch, world, why);
      break;
    case LaunchKind::External:
      world->rank = launch.rank;
      world->nranks = launch.nranks;
      res = bootstrapInitFromEnv(launch.rank, launch.nranks, launch.masterAddr.c_str(), launch.masterPort,
                                 &world->bootstrap);
      if (res != rcnSuccess)
        *why = "rendezvous at " + launch.masterAddr + ":" + std::to_string(launch.masterPort) + " failed";
      break;
  }
  if (res != rcnSuccess) return res;
  return placeOnHosts(world, why);
}

bool reapChildren(World* world, double timeoutSec) {
  gChildrenDone.store(true);
  bool allClean = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSec);
  for (size_t i = 0; i < world->children.size(); ++i) {
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(world->children[i], &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (done == 0) {
      std::fprintf(stderr, "allreduce_sweep: rank %zu did not finish within %.0f s; killing it\n", i + 1, timeoutSec);
      kill(world->children[i], SIGKILL);
      waitpid(world->children[i], &status, 0);
      allClean = false;
    } else if (done == world->children[i] && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::fprintf(stderr, "allreduce_sweep: rank %zu %s\n", i + 1, exitText(status).c_str());
      allClean = false;
    }
  }
  world->children.clear();
  return allClean;
}

}  // namespace rcn::bench
