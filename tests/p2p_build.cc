// SPDX-License-Identifier: BSD-3-Clause
#include "p2p_build.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <thread>

#include "support/timeout_scale.h"
#include "transport/transport.h"

namespace rcn::test {

namespace {

bool isProxy(const P2pOptions& options) { return options.create == createProxyPath; }

void setOptionEnv(const P2pOptions& options) {
  const char* llName = isProxy(options) ? "ROCENANTE_PROXY_LL_MAX_BYTES" : "ROCENANTE_LL_MAX_BYTES";
  if (options.llMaxBytes) setenv(llName, options.llMaxBytes, 1);
  else unsetenv(llName);
  if (options.ipc) setenv("ROCENANTE_P2P_IPC", options.ipc, 1);
  else unsetenv("ROCENANTE_P2P_IPC");
  // Unset only what this helper set: a ROCENANTE_PDL from the caller's environment stays.
  if (options.pdl) setenv("ROCENANTE_PDL", options.pdl, 1);
}

bool buildOne(Bootstrap* bootstrap, int rank, int nranks, int device, const P2pOptions& options,
              std::unique_ptr<FastPath>* out, std::string* why) {
  // A device that does not exist is left for the path's own cudaSetDevice to fail on.
  if (device != kNoSuchDevice && cudaSetDevice(device) != cudaSuccess) {
    *why = "cudaSetDevice failed";
    return false;
  }
  FastPathContext ctx;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.cudaDev = device;
  ctx.maxBytes = options.maxBytes;
  ctx.maxBlocks = options.maxBlocks;
  ctx.threads = options.threads;
  ctx.timeoutMs = uint64_t(scaledMs(int64_t(options.timeoutMs)));
  ctx.bootstrap = bootstrap;
  const char* name = isProxy(options) ? "proxy" : "p2p";
  rcnResult_t res = (options.create ? options.create : createP2pPath)(ctx, out, why);
  if (res != rcnSuccess) {
    *why = std::string("creating the ") + name + " path returned " + rcnGetErrorString(res) + ": " + *why;
    return false;
  }
  if (!*out) {
    *why = std::string("no ") + name + " path: " + *why;
    return false;
  }
  return true;
}

}  // namespace

bool buildP2pPath(Bootstrap* bootstrap, int rank, int nranks, int device, const P2pOptions& options,
                  std::unique_ptr<FastPath>* out, std::string* why) {
  setOptionEnv(options);
  return buildOne(bootstrap, rank, nranks, device, options, out, why);
}

bool buildP2pPathsInProcess(int nranks, const P2pOptions& options,
                            std::vector<std::unique_ptr<FastPath>>* out, std::string* why) {
  setOptionEnv(options);
  out->clear();
  out->resize(nranks);
  std::vector<std::string> whys(nranks);
  std::vector<int> ok(nranks, 0);
  auto group = makeLocalBootstrapGroup(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bootstrap = bootstrapInitLocal(group, r);
      const int device = r == options.unusableDeviceRank ? kNoSuchDevice : options.oneGpu ? 0 : r;
      ok[r] = buildOne(bootstrap.get(), r, nranks, device, options, &(*out)[r], &whys[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r)
    if (!ok[r]) {
      *why = "rank " + std::to_string(r) + ": " + whys[r];
      return false;
    }
  return true;
}

AllReduceFn pathFn(FastPath* path) {
  return [path](const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                cudaStream_t stream) { return path->allReduce(send, recv, count, dtype, op, stream); };
}

}  // namespace rcn::test
