// SPDX-License-Identifier: BSD-3-Clause
// The public entry points for processes started by an external launcher
// (torchrun, mpirun, srun): what the launcher's variables say, and a
// communicator built over the MASTER_ADDR:MASTER_PORT rendezvous.
#include <cstdio>
#include <memory>
#include <string>

#include "core/bootstrap_env.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/launch_env.h"
#include "rocenante/rocenante.h"

namespace {

// The launch this process belongs to, or why there is none: rcnInvalidUsage
// when no launcher started it, rcnInvalidArgument when its variables are wrong.
// A query (noneIsError false) logs "no launcher" at INFO only: programs ask
// it to decide whether to start their own ranks, and must not print a warning
// on every plain run.
rcnResult_t readLaunch(const char* caller, bool noneIsError, rcn::LauncherInfo* launch) {
  std::string why;
  if (!rcn::parseLauncherEnv(rcn::processEnv(), launch, &why)) {
    RCN_WARN(RCN_LOG_INIT, "%s: %s", caller, why.c_str());
    return rcnInvalidArgument;
  }
  if (launch->external) return rcnSuccess;
  const std::string none = "no launcher variables are set; expected " + rcn::launcherVarsHint() +
                           rcn::partialLauncherVars(rcn::processEnv());
  if (noneIsError) {
    RCN_WARN(RCN_LOG_INIT, "%s: %s", caller, none.c_str());
  } else {
    RCN_INFO(RCN_LOG_INIT, "%s: %s", caller, none.c_str());
    rcn::setLastError(std::string(caller) + ": " + none);
  }
  return rcnInvalidUsage;
}

}  // namespace

#pragma GCC visibility push(default)

extern "C" {

// Each clears the thread's last error first, as api.cc's entry points do.
rcnResult_t rcnGetLaunchInfo(rcnLaunchInfo* info) {
  rcn::clearLastError();
  RCN_ARG_CHECK(info != nullptr, "rcnGetLaunchInfo: info is NULL");
  *info = rcnLaunchInfo{};
  info->localRank = -1;
  rcn::LauncherInfo launch;
  RCN_CHECK(readLaunch("rcnGetLaunchInfo", false, &launch));
  info->rank = launch.rank;
  info->nranks = launch.nranks;
  info->localRank = launch.localRank;
  std::snprintf(info->source, sizeof info->source, "%s", launch.source.c_str());
  return rcnSuccess;
}

rcnResult_t rcnCommInitFromLaunch(rcnComm_t* comm) {
  rcn::clearLastError();
  RCN_ARG_CHECK(comm != nullptr, "rcnCommInitFromLaunch: comm is NULL");
  *comm = nullptr;
  rcn::LauncherInfo launch;
  RCN_CHECK(readLaunch("rcnCommInitFromLaunch", true, &launch));
  RCN_INFO(RCN_LOG_INIT, "rcnCommInitFromLaunch: %s rank %d of %d, rendezvous %s:%d", launch.source.c_str(),
           launch.rank, launch.nranks, launch.masterAddr.c_str(), launch.masterPort);
  std::unique_ptr<rcn::Bootstrap> bootstrap;
  RCN_CHECK(rcn::bootstrapInitFromEnv(launch.rank, launch.nranks, launch.masterAddr.c_str(), launch.masterPort,
                                      &bootstrap));
  return rcn::commCreateRank(launch.rank, launch.nranks, std::move(bootstrap), comm);
}

}  // extern "C"

#pragma GCC visibility pop
