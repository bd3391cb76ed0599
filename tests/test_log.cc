// SPDX-License-Identifier: BSD-3-Clause
// Logging: what ROCENANTE_DEBUG, ROCENANTE_DEBUG_SUBSYS and
// ROCENANTE_DEBUG_FILE select, and the warnings for values it cannot use.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/log.h"
#include "rocenante/rocenante.h"
#include "support/scoped_env.h"

using rcn::test::ScopedEnv;

namespace {

// The log written while `emit` runs, with the given environment applied.
template <typename Emit>
std::string logOf(const char* level, const char* subsys, Emit emit) {
  const std::string path = "/tmp/rcn_test_log_" + std::to_string(getpid()) + ".txt";
  std::remove(path.c_str());
  {
    ScopedEnv file("ROCENANTE_DEBUG_FILE", path.c_str());
    ScopedEnv debug("ROCENANTE_DEBUG", level);
    ScopedEnv mask("ROCENANTE_DEBUG_SUBSYS", subsys);
    rcn::logReinit();
    emit();
  }
  rcn::logReinit();  // back to stderr and the defaults
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  return text.str();
}

}  // namespace

TEST_CASE("warnings print whatever the subsystem mask says") {
  std::string log = logOf("WARN", "^ENV", [] { RCN_WARN(RCN_LOG_ENV, "env warning %d", 1); });
  CHECK(log.find("ROCENANTE WARN env warning 1") != std::string::npos);
  log = logOf("INFO", "INIT", [] {
    RCN_INFO(RCN_LOG_ENV, "env detail");
    RCN_INFO(RCN_LOG_INIT, "init detail");
  });
  CHECK(log.find("env detail") == std::string::npos);
  CHECK(log.find("init detail") != std::string::npos);
}

// VERSION prints the version line and nothing below it (NCCL_DEBUG=VERSION's
// banner); the line comes once a process, so the first call here makes it.
TEST_CASE("ROCENANTE_DEBUG=VERSION prints the version, once, and no warnings") {
  const std::string log = logOf("VERSION", "ALL", [] {
    rcn::logVersionOnce();
    rcn::logVersionOnce();
    RCN_WARN(RCN_LOG_INIT, "a warning");
  });
  const std::string line = "ROCENANTE VERSION rocenante version " + std::to_string(ROCENANTE_MAJOR) + ".";
  CHECK(log.find(line) != std::string::npos);
  CHECK(log.find(line) == log.rfind(line));
  CHECK(log.find("a warning") == std::string::npos);
}

TEST_CASE("an unknown level or subsystem is warned about") {
  std::string log = logOf("info", "INIT,BOGUS", [] { RCN_INFO(RCN_LOG_INIT, "lower-case level works"); });
  CHECK(log.find("lower-case level works") != std::string::npos);
  CHECK(log.find("unknown subsystem(s) BOGUS") != std::string::npos);
  log = logOf("LOUD", "ALL", [] { RCN_INFO(RCN_LOG_INIT, "not at WARN"); });
  CHECK(log.find("ROCENANTE_DEBUG=LOUD is not a level") != std::string::npos);
  CHECK(log.find("not at WARN") == std::string::npos);
}

TEST_CASE("a log FIFO whose reader leaves is dropped for stderr, not a SIGPIPE") {
  const std::string fifo = "/tmp/rcn_test_log_fifo_" + std::to_string(getpid());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  {
    ScopedEnv file("ROCENANTE_DEBUG_FILE", fifo.c_str());
    ScopedEnv debug("ROCENANTE_DEBUG", "WARN");
    rcn::logReinit();
    RCN_WARN(RCN_LOG_INIT, "read by the reader");
    char buffer[256];
    CHECK(read(reader, buffer, sizeof buffer) > 0);
    close(reader);
    RCN_WARN(RCN_LOG_INIT, "after the reader left");  // default SIGPIPE action: the test would die here
    RCN_WARN(RCN_LOG_INIT, "and once more, on stderr");
  }
  rcn::logReinit();
  std::remove(fifo.c_str());
  sigset_t pending;
  REQUIRE(sigpending(&pending) == 0);
  CHECK(sigismember(&pending, SIGPIPE) == 0);
}
