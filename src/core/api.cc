// SPDX-License-Identifier: BSD-3-Clause
// The public rcn* entry points: argument checks, then the communicator code.
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/dtype.h"
#include "core/launch_env.h"
#include "core/log.h"
#include "core/nccl_lib.h"
#include "core/params.h"
#include "core/rank_threads.h"
#include "rocenante/rocenante.h"

// Users mix our enums with NCCL's; they must mean the same numbers. NCCL
// 2.30 added ncclTimeout after our last code, so a newer nccl.h may hold more
// results than we do (rocenante never returns one it does not define).
static_assert(rcnSuccess == (int)ncclSuccess && rcnInvalidArgument == (int)ncclInvalidArgument &&
                  rcnInvalidUsage == (int)ncclInvalidUsage && rcnRemoteError == (int)ncclRemoteError &&
                  rcnInProgress == (int)ncclInProgress && rcnNumResults <= (int)ncclNumResults &&
                  rcnSystemError == (int)ncclSystemError && rcnInternalError == (int)ncclInternalError &&
                  rcnUnhandledCudaError == (int)ncclUnhandledCudaError,
              "result codes must match nccl.h");
static_assert(rcnInt8 == (int)ncclInt8 && rcnUint8 == (int)ncclUint8 && rcnInt32 == (int)ncclInt32 &&
                  rcnUint32 == (int)ncclUint32 && rcnInt64 == (int)ncclInt64 &&
                  rcnUint64 == (int)ncclUint64 && rcnFloat16 == (int)ncclFloat16 &&
                  rcnFloat32 == (int)ncclFloat32 && rcnFloat64 == (int)ncclFloat64 &&
                  rcnBfloat16 == (int)ncclBfloat16 && rcnFloat8e4m3 == (int)ncclFloat8e4m3 &&
                  rcnFloat8e5m2 == (int)ncclFloat8e5m2 && rcnNumTypes == (int)ncclNumTypes,
              "data types must match nccl.h");
static_assert(rcnSum == (int)ncclSum && rcnProd == (int)ncclProd && rcnMax == (int)ncclMax &&
                  rcnMin == (int)ncclMin && rcnAvg == (int)ncclAvg && rcnNumOps == (int)ncclNumOps,
              "reduction ops must match nccl.h");
static_assert(RCN_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "unique id size must match nccl.h");

namespace {

// rcnCommInitAll starts a thread a device: far more than any host's GPUs,
// few enough that thread creation does not fail for it.
constexpr int kMaxInitAllDevices = 1024;

rcnResult_t initRank(rcnComm_t* comm, int nranks, const rcnUniqueId& id, int rank) {
  std::unique_ptr<rcn::Bootstrap> bootstrap;
  RCN_CHECK(rcn::bootstrapInitTcp(id, rank, nranks, &bootstrap));
  return rcn::commCreateRank(rank, nranks, std::move(bootstrap), comm);
}

// rcnCommCount, rcnCommUserRank and rcnCommCuDevice: one field of a checked
// handle into a checked pointer.
rcnResult_t copyCommInt(rcnComm_t comm, int rcnComm::*field, const char* caller, const char* outName, int* out) {
  RCN_CHECK(rcn::commCheck(comm, caller));
  RCN_ARG_CHECK(out != nullptr, "%s: %s is NULL", caller, outName);
  *out = comm->*field;
  return rcnSuccess;
}

// One thread per GPU, each building its rank against an in-process bootstrap.
rcnResult_t initAll(rcnComm_t* comms, int ndev, const int* devlist) {
  auto group = rcn::makeLocalBootstrapGroup(ndev);
  auto createRank = [&](int rank) {
    rcn::CommInitArgs args;
    args.rank = rank;
    args.nranks = ndev;
    args.cudaDev = devlist ? devlist[rank] : rank;
    args.bootstrap = rcn::bootstrapInitLocal(group, rank);
    return rcn::commCreate(std::move(args), &comms[rank]);
  };
  auto stopStarted = [&](int missing) { rcn::bootstrapInitLocal(group, missing)->abort(); };
  const rcn::RankFailure failure = rcn::runRankThreads(ndev, createRank, stopStarted);
  if (failure.rank < 0) return rcnSuccess;
  for (int j = 0; j < ndev; ++j)
    if (comms[j]) rcn::commAbort(comms[j]), comms[j] = nullptr;
  // Again on the caller's thread, so its rcnGetLastError names the cause.
  RCN_WARN(RCN_LOG_INIT, "rcnCommInitAll: rank %d failed: %s", failure.rank, failure.cause.c_str());
  return failure.result;
}

}  // namespace

#pragma GCC visibility push(default)

extern "C" {

// Every entry point that returns a result clears the thread's last error
// first, so that rcnGetLastError after a failure speaks of that call.

rcnResult_t rcnGetVersion(int* version) {
  rcn::clearLastError();
  RCN_ARG_CHECK(version != nullptr, "rcnGetVersion: version is NULL");
  *version = ROCENANTE_VERSION_CODE;
  return rcnSuccess;
}

rcnResult_t rcnGetUniqueId(rcnUniqueId* uniqueId) {
  rcn::clearLastError();
  RCN_ARG_CHECK(uniqueId != nullptr, "rcnGetUniqueId: uniqueId is NULL");
  return rcn::bootstrapGetUniqueId(uniqueId);
}

rcnResult_t rcnCommInitRank(rcnComm_t* comm, int nranks, rcnUniqueId commId, int rank) {
  rcn::clearLastError();
  RCN_ARG_CHECK(comm != nullptr, "rcnCommInitRank: comm is NULL");
  *comm = nullptr;
  RCN_ARG_CHECK(nranks >= 1 && nranks <= rcn::kMaxCommRanks, "rcnCommInitRank: nranks=%d is not in 1..%d", nranks,
                rcn::kMaxCommRanks);
  RCN_ARG_CHECK(rank >= 0 && rank < nranks, "rcnCommInitRank: rank=%d is not in 0..%d", rank,
                nranks - 1);
  return initRank(comm, nranks, commId, rank);
}

rcnResult_t rcnCommInitAll(rcnComm_t* comm, int ndev, const int* devlist) {
  rcn::clearLastError();
  RCN_ARG_CHECK(comm != nullptr, "rcnCommInitAll: comm is NULL");
  // One thread a device, in this process.
  RCN_ARG_CHECK(ndev >= 1 && ndev <= kMaxInitAllDevices, "rcnCommInitAll: ndev=%d is not in 1..%d", ndev,
                kMaxInitAllDevices);
  for (int i = 0; i < ndev; ++i) comm[i] = nullptr;
  // The devices must exist where they are used: not on the host backend,
  // which ignores them, nor where CUDA sees none (creation says why then).
  std::string backend;
  const bool host = rcn::paramChoice(rcn::ParamId::Backend, &backend) != rcnSuccess || backend == "host";
  const int visible = host ? 0 : rcn::visibleGpuCount();
  RCN_ARG_CHECK(devlist || visible == 0 || ndev <= visible,
                "rcnCommInitAll: ndev=%d devices 0..%d without a devlist, but %d device(s) are visible", ndev,
                ndev - 1, visible);
  if (devlist) {
    for (int i = 0; i < ndev; ++i) {
      RCN_ARG_CHECK(devlist[i] >= 0, "rcnCommInitAll: devlist[%d]=%d is not a device", i, devlist[i]);
      RCN_ARG_CHECK(visible == 0 || devlist[i] < visible, "rcnCommInitAll: devlist[%d]=%d, but %d device(s) are visible",
                    i, devlist[i], visible);
      // NCCL, made beside the fast path, takes one rank a device; without it
      // ranks may share one (the p2p path maps a shared device's memory).
      for (int j = 0; j < i; ++j)
        RCN_ARG_CHECK(devlist[i] != devlist[j] || (visible > 0 && !rcn::paramBool(rcn::ParamId::NativeNccl)),
                      "rcnCommInitAll: device %d is listed twice (each rank needs its own GPU for the NCCL "
                      "communicator made beside the fast path; ROCENANTE_NATIVE_NCCL=0 makes none)", devlist[i]);
    }
  }
  return initAll(comm, ndev, devlist);
}

rcnResult_t rcnCommDestroy(rcnComm_t comm) {
  rcn::clearLastError();
  if (comm == nullptr) return rcnSuccess;  // as ncclCommDestroy(NULL)
  RCN_CHECK(rcn::commCheck(comm, "rcnCommDestroy"));
  return rcn::commDestroy(comm);
}

rcnResult_t rcnCommAbort(rcnComm_t comm) {
  rcn::clearLastError();
  if (comm == nullptr) return rcnSuccess;
  RCN_CHECK(rcn::commCheck(comm, "rcnCommAbort"));
  rcn::commAbort(comm);
  return rcnSuccess;
}

rcnResult_t rcnAllReduce(const void* sendbuff, void* recvbuff, size_t count, rcnDataType_t datatype,
                         rcnRedOp_t op, rcnComm_t comm, rcnStream_t stream) {
  rcn::clearLastError();
  RCN_CHECK(rcn::commCheck(comm, "rcnAllReduce"));
  RCN_ARG_CHECK(rcn::dtypeIsValid(datatype), "rcnAllReduce: datatype %d is not a valid type",
                static_cast<int>(datatype));
  RCN_ARG_CHECK(rcn::opIsValid(op), "rcnAllReduce: op %d is not a valid reduction op",
                static_cast<int>(op));
  if (count == 0) return rcnSuccess;
  RCN_ARG_CHECK(sendbuff != nullptr, "rcnAllReduce: sendbuff is NULL with count=%zu", count);
  RCN_ARG_CHECK(recvbuff != nullptr, "rcnAllReduce: recvbuff is NULL with count=%zu", count);
  RCN_ARG_CHECK(rcn::byteCountFits(count, datatype),
                "rcnAllReduce: count=%zu of %s overflows a byte count", count, rcn::dtypeName(datatype));
  // In place is the same pointer; buffers that overlap otherwise would be
  // read after being written, chunk by chunk.
  const uintptr_t send = reinterpret_cast<uintptr_t>(sendbuff), recv = reinterpret_cast<uintptr_t>(recvbuff);
  const size_t bytes = count * rcn::dtypeSize(datatype);
  const uintptr_t apart = send < recv ? recv - send : send - recv;  // no sum: it could wrap
  RCN_ARG_CHECK(apart == 0 || apart >= bytes,
                "rcnAllReduce: sendbuff %p and recvbuff %p overlap partly (%zu bytes each); pass the same "
                "pointer for an in-place call", sendbuff, recvbuff, bytes);
  return rcn::commAllReduce(comm, sendbuff, recvbuff, count, datatype, op,
                            reinterpret_cast<cudaStream_t>(stream));
}

rcnResult_t rcnCommGetAsyncError(rcnComm_t comm, rcnResult_t* asyncError) {
  rcn::clearLastError();
  RCN_CHECK(rcn::commCheck(comm, "rcnCommGetAsyncError"));
  RCN_ARG_CHECK(asyncError != nullptr, "rcnCommGetAsyncError: asyncError is NULL");
  *asyncError = rcnSuccess;
  rcn::CommCallScope inCall(comm);  // a destroy or abort from another thread waits before freeing the path
  if (!rcn::commUsable(comm)) {
    RCN_WARN(RCN_LOG_COLL, "rcnCommGetAsyncError: comm %p was aborted or is being destroyed", (void*)comm);
    return rcnInvalidUsage;
  }
  if (comm->fast) {
    std::string why;
    *asyncError = comm->fast->asyncError(&why);
    if (*asyncError != rcnSuccess) {
      RCN_WARN(RCN_LOG_COLL, "%s", why.c_str());
      return rcnSuccess;
    }
  }
  if (comm->nccl) {
    const rcn::NcclApi* nccl = nullptr;
    RCN_CHECK(rcn::ncclApi(&nccl));
    ncclResult_t ncclError = ncclSuccess;
    RCN_NCCL_CHECK(nccl, commGetAsyncError(comm->nccl, &ncclError));
    *asyncError = rcn::fromNccl(ncclError);
  }
  return rcnSuccess;
}

rcnResult_t rcnCommGetDeviceComm(rcnComm_t comm, rcnDeviceComm* dev) {
  rcn::clearLastError();
  RCN_CHECK(rcn::commCheck(comm, "rcnCommGetDeviceComm"));
  RCN_ARG_CHECK(dev != nullptr, "rcnCommGetDeviceComm: dev is NULL");
  *dev = rcnDeviceComm{};
  std::string why = "the fast path is off (every call goes to NCCL)";
  rcn::CommCallScope inCall(comm);  // comm->fast stays while we read it
  if (rcn::commUsable(comm) && comm->fast && comm->fast->deviceComm(dev, &why)) return rcnSuccess;
  if (!rcn::commUsable(comm)) why = "the communicator was aborted or is being destroyed";
  // A query (callers fall back to rcnAllReduce), so not a warning.
  const std::string text = "rcnCommGetDeviceComm: rank " + std::to_string(comm->rank) + ": " + why;
  RCN_INFO(RCN_LOG_INIT, "%s", text.c_str());
  rcn::setLastError(text);
  return rcnInvalidUsage;
}

rcnResult_t rcnCommQuery(rcnComm_t comm, rcnCommInfo* info) {
  rcn::clearLastError();
  RCN_CHECK(rcn::commCheck(comm, "rcnCommQuery"));
  RCN_ARG_CHECK(info != nullptr, "rcnCommQuery: info is NULL");
  *info = comm->info;
  return rcnSuccess;
}

rcnResult_t rcnCommTakesFastPath(rcnComm_t comm, size_t count, rcnDataType_t datatype, rcnRedOp_t op,
                                 rcnStream_t stream, int* takesFastPath) {
  rcn::clearLastError();
  RCN_CHECK(rcn::commCheck(comm, "rcnCommTakesFastPath"));
  RCN_ARG_CHECK(takesFastPath != nullptr, "rcnCommTakesFastPath: takesFastPath is NULL");
  *takesFastPath = 0;
  RCN_ARG_CHECK(rcn::dtypeIsValid(datatype), "rcnCommTakesFastPath: datatype %d is not a valid type",
                static_cast<int>(datatype));
  RCN_ARG_CHECK(rcn::opIsValid(op), "rcnCommTakesFastPath: op %d is not a valid reduction op", static_cast<int>(op));
  RCN_ARG_CHECK(rcn::byteCountFits(count, datatype), "rcnCommTakesFastPath: count=%zu of %s overflows a byte count",
                count, rcn::dtypeName(datatype));
  rcn::CommCallScope inCall(comm);  // comm->fast stays while we read it
  if (!rcn::commUsable(comm) || !comm->fast) return rcnSuccess;
  const size_t bytes = count * rcn::dtypeSize(datatype);
  const cudaStream_t cudaStream = reinterpret_cast<cudaStream_t>(stream);
  // Without NCCL the fast path takes whatever fits it (the policy has nothing else to send it to).
  *takesFastPath = comm->nccl ? rcn::commTakesFastPath(comm, bytes, datatype, op, cudaStream)
                              : comm->fast->supports(datatype, op) && bytes <= comm->fast->maxBytes();
  return rcnSuccess;
}

rcnResult_t rcnCommCount(rcnComm_t comm, int* count) {
  rcn::clearLastError();
  return copyCommInt(comm, &rcnComm::nranks, "rcnCommCount", "count", count);
}

rcnResult_t rcnCommUserRank(rcnComm_t comm, int* rank) {
  rcn::clearLastError();
  return copyCommInt(comm, &rcnComm::rank, "rcnCommUserRank", "rank", rank);
}

rcnResult_t rcnCommCuDevice(rcnComm_t comm, int* device) {
  rcn::clearLastError();
  return copyCommInt(comm, &rcnComm::cudaDev, "rcnCommCuDevice", "device", device);
}

const char* rcnGetErrorString(rcnResult_t result) {
  // A C caller may pass any int; C++ must not load an enum outside its
  // enumerators' range (UBSan's enum check), so the value is read as an int.
  static_assert(sizeof(rcnResult_t) == sizeof(int), "rcnResult_t is an int-sized enum");
  int code = 0;
  std::memcpy(&code, &result, sizeof code);
  switch (code) {
    case rcnSuccess: return "no error";
    case rcnUnhandledCudaError: return "unhandled cuda error (run with ROCENANTE_DEBUG=INFO for details)";
    case rcnSystemError: return "unhandled system error (run with ROCENANTE_DEBUG=INFO for details)";
    case rcnInternalError: return "internal error - please report this issue";
    case rcnInvalidArgument: return "invalid argument (rcnGetLastError() names it)";
    case rcnInvalidUsage: return "invalid usage (rcnGetLastError() says why)";
    case rcnRemoteError: return "remote process exited or there was a network error";
    case rcnInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

const char* rcnGetLastError(rcnComm_t comm) { return rcn::lastErrorText(); }

}  // extern "C"

#pragma GCC visibility pop
