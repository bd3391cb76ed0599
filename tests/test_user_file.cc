// SPDX-License-Identifier: BSD-3-Clause
// Files the user names (core/user_file.h): read whole only when regular and
// small, written without blocking on a FIFO that no one reads, nor dying of
// SIGPIPE when its reader leaves.
#include <catch2/catch_test_macros.hpp>

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/user_file.h"

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("configuration files are read only when regular and small") {
  const std::string path = "/tmp/rcn_test_user_file_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << "version: 1\n";
  std::string text, why;
  CHECK(rcn::readConfigFile(path, &text, &why));
  CHECK(text == "version: 1\n");
  std::remove(path.c_str());
  CHECK_FALSE(rcn::readConfigFile(path, &text, &why));
  CHECK(contains(why, "No such file"));
  for (const char* special : {"/tmp", "/dev/zero"}) {
    CHECK_FALSE(rcn::readConfigFile(special, &text, &why));
    CHECK(contains(why, std::string(special) + ": not a regular file"));
  }
}

TEST_CASE("output files: a FIFO with no reader is refused at once, a full disk is reported") {
  const std::string fifo = "/tmp/rcn_test_user_fifo_" + std::to_string(getpid());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  std::string why;
  CHECK(rcn::openOutputFile(fifo, true, &why) == nullptr);  // would block for ever in fopen
  CHECK(contains(why, "a FIFO with no reader"));
  std::remove(fifo.c_str());
  CHECK_FALSE(rcn::writeOutputFile("/dev/full", "some bytes", &why));
  CHECK(contains(why, "No space left"));
  CHECK_FALSE(rcn::writeOutputFile("/nonexistent/out.json", "{}", &why));
  CHECK(contains(why, "/nonexistent/out.json: No such file"));
  const std::string path = "/tmp/rcn_test_user_out_" + std::to_string(getpid()) + ".json";
  CHECK(rcn::writeOutputFile(path, "{}", &why));
  std::ifstream in(path);
  std::string back;
  in >> back;
  CHECK(back == "{}");
  std::remove(path.c_str());
}

TEST_CASE("a write to a pipe whose reader left fails with EPIPE instead of killing the program") {
  int ends[2];
  REQUIRE(pipe(ends) == 0);
  close(ends[0]);
  {
    rcn::SigpipeBlocked noSigpipe;
    errno = 0;
    CHECK(write(ends[1], "x", 1) == -1);
    CHECK(errno == EPIPE);
  }
  close(ends[1]);
  // Nothing is left pending for later, and the thread's mask is as before.
  sigset_t pending, mask;
  REQUIRE(sigpending(&pending) == 0);
  CHECK(sigismember(&pending, SIGPIPE) == 0);
  REQUIRE(pthread_sigmask(SIG_BLOCK, nullptr, &mask) == 0);
  CHECK(sigismember(&mask, SIGPIPE) == 0);
}
