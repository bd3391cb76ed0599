// SPDX-License-Identifier: BSD-3-Clause
#include "support/gpu.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime_api.h>

#include "core/params.h"

namespace rcn::test {

// Counted in a child process: initialising CUDA in the parent would make
// later fork()ed ranks unable to use the GPU.
int gpuCount() {
  static int cached = -1;
  if (cached >= 0) return cached;
  int fds[2];
  if (pipe(fds) != 0) return 0;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    ssize_t w = write(fds[1], &n, sizeof n);
    (void)w;
    _exit(0);
  }
  close(fds[1]);
  int n = 0;
  if (read(fds[0], &n, sizeof n) != static_cast<ssize_t>(sizeof n)) n = 0;
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  cached = n;
  return n;
}

bool shareGpus() { return paramBool(ParamId::TestShareGpus); }

int rankDevice(int rank) { return gpuCount() > 0 ? rank % gpuCount() : 0; }

void exitUnlessGpus(int n) {
  int have = gpuCount();
  if (have >= n) return;
  std::printf("SKIP: needs %d GPU(s), found %d\n", n, have);
  std::fflush(stdout);
  std::_Exit(77);
}

}  // namespace rcn::test
