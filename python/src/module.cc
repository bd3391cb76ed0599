// SPDX-License-Identifier: BSD-3-Clause
// rocenante._rocenante: the C API on integers. Buffers and streams come in as
// addresses (tensor.data_ptr(), stream.cuda_stream) and a communicator as its
// handle, so the extension needs no PyTorch headers and any PyTorch works;
// rocenante/ (Python) checks tensors and turns them into these calls. Every
// call that can wait on peers releases the GIL, so other threads (and
// another rank in this process) keep running.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "errors.h"
#include "rocenante/rocenante.h"

namespace nb = nanobind;
using rcnpy::check;

// Collectives whose implementation may be missing from the librocenante this
// module runs against: bound weakly, so the module still loads, and a call
// reports that the library lacks it (available() says which it has).
#pragma weak rcnAllGather
#pragma weak rcnReduceScatter
#pragma weak rcnAllReduceResidualRmsNorm

namespace {

using Address = uintptr_t;
using Release = nb::call_guard<nb::gil_scoped_release>;

rcnComm_t commOf(Address handle) { return reinterpret_cast<rcnComm_t>(handle); }
const void* in(Address a) { return reinterpret_cast<const void*>(a); }
void* out(Address a) { return reinterpret_cast<void*>(a); }
rcnStream_t streamOf(Address s) { return reinterpret_cast<rcnStream_t>(s); }

bool available(const std::string& name) {
  if (name == "all_reduce") return true;
  if (name == "all_gather") return rcnAllGather != nullptr;
  if (name == "reduce_scatter") return rcnReduceScatter != nullptr;
  if (name == "all_reduce_residual_rms_norm") return rcnAllReduceResidualRmsNorm != nullptr;
  throw nb::value_error(("rocenante has no collective named '" + name + "'").c_str());
}

void requireAvailable(const char* name, const char* cName) {
  if (!available(name))
    throw rcnpy::RcnError(rcnInvalidUsage, std::string(cName) + ": this librocenante.so does not implement it");
}

nb::bytes uniqueId() {
  rcnUniqueId id;
  check(rcnGetUniqueId(&id), "rcnGetUniqueId");
  return nb::bytes(id.internal, sizeof(id.internal));
}

Address initRank(int nranks, nb::bytes id, int rank) {
  if (id.size() != RCN_UNIQUE_ID_BYTES)
    throw nb::value_error(("unique_id must be " + std::to_string(RCN_UNIQUE_ID_BYTES) +
                           " bytes (from get_unique_id()), got " + std::to_string(id.size()))
                              .c_str());
  rcnUniqueId uid;
  std::memcpy(uid.internal, id.c_str(), sizeof(uid.internal));
  rcnComm_t comm = nullptr;
  {
    nb::gil_scoped_release release;
    check(rcnCommInitRank(&comm, nranks, uid, rank), "rcnCommInitRank");
  }
  return reinterpret_cast<Address>(comm);
}

Address initFromLaunch() {
  rcnComm_t comm = nullptr;
  check(rcnCommInitFromLaunch(&comm), "rcnCommInitFromLaunch");
  return reinterpret_cast<Address>(comm);
}

// (rank, nranks, local rank, source), or None without launcher variables.
nb::object launchInfo() {
  rcnLaunchInfo info{};
  const rcnResult_t result = rcnGetLaunchInfo(&info);
  if (result == rcnInvalidUsage && info.nranks == 0) return nb::none();
  check(result, "rcnGetLaunchInfo");
  return nb::make_tuple(info.rank, info.nranks, info.localRank, std::string(info.source));
}

nb::dict query(Address handle) {
  rcnCommInfo info{};
  check(rcnCommQuery(commOf(handle), &info), "rcnCommQuery");
  nb::dict d;
  d["rank"] = info.rank;
  d["nranks"] = info.nranks;
  d["cuda_device"] = info.cudaDev;
  d["path"] = int(info.path);
  d["transport"] = std::string(info.transport);
  d["max_bytes"] = info.maxBytes;
  d["self_test_passed"] = bool(info.selfTestPassed);
  d["self_test_us_fast"] = info.selfTestUsFast;
  d["self_test_us_nccl"] = info.selfTestUsNccl;
  d["reason"] = std::string(info.reason);
  return d;
}

bool takesFastPath(Address handle, size_t count, int dtype, int op, Address stream) {
  int takes = 0;
  check(rcnCommTakesFastPath(commOf(handle), count, rcnDataType_t(dtype), rcnRedOp_t(op), streamOf(stream), &takes),
        "rcnCommTakesFastPath");
  return takes != 0;
}

// Raises the recorded asynchronous error, if any.
void checkAsyncError(Address handle) {
  rcnResult_t asyncError = rcnSuccess;
  check(rcnCommGetAsyncError(commOf(handle), &asyncError), "rcnCommGetAsyncError");
  check(asyncError, "the communicator's asynchronous error");
}

void allReduce(Address handle, Address send, Address recv, size_t count, int dtype, int op, Address stream) {
  check(
      rcnAllReduce(in(send), out(recv), count, rcnDataType_t(dtype), rcnRedOp_t(op), commOf(handle), streamOf(stream)),
      "rcnAllReduce");
}

void allGather(Address handle, Address send, Address recv, size_t sendcount, int dtype, Address stream) {
  requireAvailable("all_gather", "rcnAllGather");
  check(rcnAllGather(in(send), out(recv), sendcount, rcnDataType_t(dtype), commOf(handle), streamOf(stream)),
        "rcnAllGather");
}

void reduceScatter(Address handle, Address send, Address recv, size_t recvcount, int dtype, int op, Address stream) {
  requireAvailable("reduce_scatter", "rcnReduceScatter");
  check(rcnReduceScatter(in(send), out(recv), recvcount, rcnDataType_t(dtype), rcnRedOp_t(op), commOf(handle),
                         streamOf(stream)),
        "rcnReduceScatter");
}

void allReduceResidualRmsNorm(Address handle, Address send, Address residual, Address weight, Address normOut,
                              size_t tokens, size_t hidden, int dtype, int normType, Address normScale, float eps,
                              Address stream) {
  requireAvailable("all_reduce_residual_rms_norm", "rcnAllReduceResidualRmsNorm");
  check(rcnAllReduceResidualRmsNorm(in(send), out(residual), in(weight), out(normOut), tokens, hidden,
                                    rcnDataType_t(dtype), rcnDataType_t(normType),
                                    reinterpret_cast<const float*>(normScale), eps, commOf(handle), streamOf(stream)),
        "rcnAllReduceResidualRmsNorm");
}

}  // namespace

NB_MODULE(_rocenante, m) {
  m.doc() = "rocenante's C API on addresses and handles; use the rocenante package, not this module.";
  rcnpy::registerErrorTranslator();
  m.def("version", [] {
    int v = 0;
    check(rcnGetVersion(&v), "rcnGetVersion");
    return v;
  });
  m.def("available", &available, nb::arg("name"));
  m.def("get_unique_id", &uniqueId);
  m.def("comm_init_rank", &initRank, nb::arg("nranks"), nb::arg("unique_id"), nb::arg("rank"));
  m.def("comm_init_from_launch", &initFromLaunch, Release());
  m.def("launch_info", &launchInfo);
  m.def(
      "comm_destroy", [](Address h) { check(rcnCommDestroy(commOf(h)), "rcnCommDestroy"); }, Release());
  m.def(
      "comm_abort", [](Address h) { check(rcnCommAbort(commOf(h)), "rcnCommAbort"); }, Release());
  m.def("query", &query);
  m.def("takes_fast_path", &takesFastPath, Release());
  m.def("check_async_error", &checkAsyncError, Release());
  m.def("all_reduce", &allReduce, Release());
  m.def("all_gather", &allGather, Release());
  m.def("reduce_scatter", &reduceScatter, Release());
  m.def("all_reduce_residual_rms_norm", &allReduceResidualRmsNorm, Release());
}
