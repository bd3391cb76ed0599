// SPDX-License-Identifier: BSD-3-Clause
#include "launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "checkpoint.h"
#include "core/strings.h"
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

namespace {

// The id our launcher wrote into the pipe at fd (--id-fd), read whole; the
// pipe is closed after.
rcnUniqueId receiveId(int fd) {
  if (fd < 0) throw EngineError("--rank without --id-fd: only the engine's own launcher starts ranks this way");
  rcnUniqueId id;
  size_t got = 0;
  while (got < sizeof id.internal) {
    const ssize_t n = read(fd, id.internal + got, sizeof id.internal - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fd);
  if (got != sizeof id.internal)
    throw EngineError("--id-fd " + std::to_string(fd) + " gave " + std::to_string(got) + " of the id's " +
                      std::to_string(sizeof id.internal) + " bytes");
  return id;
}

}  // namespace

rcnComm_t joinComm(const EngineOptions& o, int rank) {
  rcnComm_t comm = nullptr;
  if (o.externalLaunch) {
    rcnCheck(rcnCommInitFromLaunch(&comm), "rcnCommInitFromLaunch");
  } else {
    rcnCheck(rcnCommInitRank(&comm, o.tp, receiveId(o.idFd), rank), "rcnCommInitRank");
  }
  return comm;
}

namespace {

// The model splits over the ranks (planShard), checked before any is
// started, so that a --tp it cannot take fails at once, not in every rank.
void requireSplits(const EngineOptions& o) {
  const ModelConfig config = o.randomWeights ? shapeConfig(o.shape) : checkpointConfig(o.modelPath);
  planShard(config, o.tp, 0);
}

void printError(const std::string& what) { std::fprintf(stderr, "rcn_engine: error: %s\n", what.c_str()); }

bool writeAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

// Appends what is in the pipe now; the read end is non-blocking.
void drain(int fd, std::string& into) {
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) into.append(buffer, size_t(n));
}

// A pipe (both ends close-on-exec) that already holds the id: the id fits
// the pipe's buffer, so the write never waits for the reader.
void idPipe(int r, const rcnUniqueId& id, int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) {
    const int err = errno;  // read before the text allocates
    throw EngineError("id pipe for rank " + std::to_string(r) + ": " + std::strerror(err));
  }
  if (!writeAll(fds[1], std::string(id.internal, sizeof id.internal))) {
    close(fds[0]);
    close(fds[1]);
    throw EngineError("writing the id for rank " + std::to_string(r) + " failed");
  }
}

// Rank r: this program again, with --rank, --id-fd (the read end of a pipe
// holding the id) and --error-fd, the write end of a pipe whose read end is
// returned.
RankProcess startRank(int argc, char** argv, int r, const rcnUniqueId& id) {
  int idFds[2];
  idPipe(r, id, idFds);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    const int err = errno;  // read before the text allocates
    close(idFds[0]);
    close(idFds[1]);
    throw EngineError("pipe for rank " + std::to_string(r) + ": " + std::strerror(err));
  }
  std::vector<std::string> args(argv, argv + argc);
  args.insert(args.end(),
              {"--rank", std::to_string(r), "--id-fd", std::to_string(idFds[0]), "--error-fd", std::to_string(fds[1])});
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(&a[0]);
  cargs.push_back(nullptr);
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {fds[0], fds[1], idFds[0], idFds[1]}) close(fd);
    throw EngineError("fork failed for rank " + std::to_string(r));
  }
  if (pid == 0) {
    dieWithLauncher(launcher);  // the death signal outlives the exec
    fcntl(fds[1], F_SETFD, 0);  // these two ends survive the exec; every other pipe is close-on-exec
    fcntl(idFds[0], F_SETFD, 0);
    execv("/proc/self/exe", cargs.data());
    std::perror("rcn_engine: execv /proc/self/exe");
    _exit(127);
  }
  close(fds[1]);
  close(idFds[0]);
  close(idFds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);  // superviseRanks polls it
  return {pid, fds[0]};
}

}  // namespace

void dieWithLauncher(pid_t launcher) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(1);  // it died before the line above
}

void reportError(const std::string& what, int errorFd) {
  if (errorFd >= 0) {
    signal(SIGPIPE, SIG_IGN);  // a launcher that is gone fails the write instead of killing us unheard
    if (writeAll(errorFd, what)) return;
  }
  printError(what);
}

namespace {

// What superviseRanks knows of its ranks as they run.
struct Supervision {
  std::vector<bool> running;
  std::vector<std::string> messages;  // each rank's error message so far
  std::set<std::string> printed;      // messages shown already
  int result = 0;  // the first failure's status
  std::chrono::steady_clock::time_point firstFailure;
};

// Reads rank r's message as it comes (a long one must not block its rank)
// and, once it has exited, prints its message unless another rank's was the
// same (an error every rank hits, a bad prompt say) and notes a failure.
void checkRank(const RankProcess& rank, int r, Supervision& s) {
  drain(rank.errorFd, s.messages[r]);
  int status = 0;
  if (waitpid(rank.pid, &status, WNOHANG) != rank.pid) return;
  s.running[r] = false;
  drain(rank.errorFd, s.messages[r]);
  if (!s.messages[r].empty() && s.printed.insert(s.messages[r]).second) printError(s.messages[r]);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok || s.result != 0) return;
  s.result = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  s.firstFailure = std::chrono::steady_clock::now();
  std::fprintf(stderr, "rcn_engine: rank %d %s %d\n", r, WIFEXITED(status) ? "exited with" : "killed by signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

// A run where one rank failed ends: the others get a grace period, then are killed.
void killStragglers(const std::vector<RankProcess>& ranks, Supervision& s) {
  const auto grace = std::chrono::seconds(30);
  if (s.result == 0 || std::chrono::steady_clock::now() - s.firstFailure <= grace) return;
  for (size_t r = 0; r < ranks.size(); ++r)
    if (s.running[r]) {
      std::fprintf(stderr, "rcn_engine: killing rank %zu, still running after another rank failed\n", r);
      kill(ranks[r].pid, SIGKILL);
    }
  s.firstFailure = std::chrono::steady_clock::now();  // reap them next
}

}  // namespace

int superviseRanks(const std::vector<RankProcess>& ranks) {
  Supervision s;
  s.running.assign(ranks.size(), true);
  s.messages.resize(ranks.size());
  while (std::find(s.running.begin(), s.running.end(), true) != s.running.end()) {
    for (size_t r = 0; r < ranks.size(); ++r)
      if (s.running[r]) checkRank(ranks[r], int(r), s);
    killStragglers(ranks, s);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return s.result;
}

int launchRanks(const EngineOptions& o, int argc, char** argv, const rcnUniqueId& id) {
  requireSplits(o);
  std::vector<RankProcess> ranks;
  try {
    for (int r = 0; r < o.tp; ++r) ranks.push_back(startRank(argc, argv, r, id));
  } catch (...) {
    // The ranks already started would wait for the missing one until their timeouts.
    for (const RankProcess& rank : ranks) kill(rank.pid, SIGKILL);
    for (const RankProcess& rank : ranks) {
      waitpid(rank.pid, nullptr, 0);
      close(rank.errorFd);
    }
    throw;
  }
  const int result = superviseRanks(ranks);
  for (const RankProcess& rank : ranks) close(rank.errorFd);
  return result;
}

int claimErrorFd(const EngineOptions& o) {
  // Kept from any program this rank starts: only the launcher reads it.
  if (o.errorFd >= 0) fcntl(o.errorFd, F_SETFD, FD_CLOEXEC);
  return o.errorFd;
}

}  // namespace engine
