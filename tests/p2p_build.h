// SPDX-License-Identifier: BSD-3-Clause
// Building p2p paths straight through createP2pPath (no communicator, no
// NCCL), for the p2p tests and the latency probe; the same for the proxy
// path (createProxyPath) where a test runs its ranks in one process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/fast_path.h"
#include "p2p_harness.h"

namespace rcn::test {

struct P2pOptions {
  size_t maxBytes = 256 * 1024;
  int maxBlocks = 32;
  int threads = 512;
  uint64_t timeoutMs = 10000;        // scaled by ROCENANTE_TEST_TIMEOUT_SCALE when the path is built
  const char* llMaxBytes = nullptr;  // ROCENANTE_LL_MAX_BYTES for this path, if set
  const char* ipc = nullptr;         // ROCENANTE_P2P_IPC for this path, if set
  const char* pdl = nullptr;         // ROCENANTE_PDL for this path, if set
  bool oneGpu = false;               // every rank on device 0 (ranks may share a GPU)
  int unusableDeviceRank = -1;       // this rank is handed a device that does not exist
  // The transport's factory (transport/transport.h): createP2pPath, or
  // createProxyPath (then llMaxBytes is ROCENANTE_PROXY_LL_MAX_BYTES).
  rcnResult_t (*create)(const FastPathContext&, std::unique_ptr<FastPath>*, std::string*) = nullptr;
};

// Builds one path for `rank` over an existing bootstrap (collective).
// Sets the options' environment variables first (process-wide).
bool buildP2pPath(Bootstrap* bootstrap, int rank, int nranks, int device, const P2pOptions& options,
                  std::unique_ptr<FastPath>* out, std::string* why);

// A device index no machine has (options.unusableDeviceRank).
constexpr int kNoSuchDevice = 1 << 20;

// Builds one path per rank, ranks 0..nranks-1 on devices 0..nranks-1 of
// this process (all on device 0 with oneGpu), one thread per rank over an
// in-process bootstrap.
bool buildP2pPathsInProcess(int nranks, const P2pOptions& options,
                            std::vector<std::unique_ptr<FastPath>>* out, std::string* why);

// An AllReduceFn that calls path->allReduce.
AllReduceFn pathFn(FastPath* path);

}  // namespace rcn::test
