// SPDX-License-Identifier: BSD-3-Clause
// One way to propagate failures: every internal call returns rcnResult_t and
// callers wrap it in RCN_CHECK, which logs file:line on the way up, as NCCL does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "core/log.h"
#include "rocenante/rocenante.h"

#define RCN_CHECK(call)                                                     \
  do {                                                                      \
    rcnResult_t rcn_res_ = (call);                                          \
    if (rcn_res_ != rcnSuccess) {                                           \
      RCN_TRACE_LOG(RCN_LOG_ALL, "%s:%d -> %d", __FILE__, __LINE__,        \
                    static_cast<int>(rcn_res_));                            \
      return rcn_res_;                                                      \
    }                                                                       \
  } while (0)

// A failed CUDA call's error is also cleared from the thread's last error, as
// NCCL's CUDACHECK does, so that a later cudaGetLastError (ours or the
// application's) does not report it again; a sticky error (a kernel fault)
// stays on the context whatever is cleared.
#define RCN_CUDA_CHECK(call)                                                                                    \
  do {                                                                                                          \
    cudaError_t rcn_err_ = (call);                                                                              \
    if (rcn_err_ != cudaSuccess) {                                                                              \
      (void)cudaGetLastError();                                                                                 \
      RCN_WARN(RCN_LOG_ALL, "%s:%d CUDA error %d '%s' from %s", __FILE__, __LINE__, static_cast<int>(rcn_err_), \
               cudaGetErrorString(rcn_err_), #call);                                                            \
      return rcnUnhandledCudaError;                                                                             \
    }                                                                                                           \
  } while (0)

// Fails with rcnInvalidArgument and a logged reason when cond is false.
#define RCN_ARG_CHECK(cond, ...)                 \
  do {                                           \
    if (!(cond)) {                               \
      RCN_WARN(RCN_LOG_ALL, __VA_ARGS__);        \
      return rcnInvalidArgument;                 \
    }                                            \
  } while (0)

// Fails with rcnSystemError and errno's text when a POSIX call returns -1.
#define RCN_SYS_CHECK(call, what)                                                     \
  do {                                                                                \
    if ((call) == -1) {                                                               \
      RCN_WARN(RCN_LOG_ALL, "%s:%d %s failed: %s", __FILE__, __LINE__, what,          \
               strerror(errno));                                                      \
      return rcnSystemError;                                                          \
    }                                                                                 \
  } while (0)

namespace rcn {
// "what: <strerror(err)>", the reason a failed system call gives. err is
// passed, not read here, so that nothing between the call and this can
// change errno first.
inline std::string errnoText(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }
}  // namespace rcn
