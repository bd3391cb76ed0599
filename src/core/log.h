// SPDX-License-Identifier: BSD-3-Clause
// Logging with NCCL's conventions: ROCENANTE_DEBUG=WARN|INFO|TRACE picks the
// level, ROCENANTE_DEBUG_SUBSYS=INIT,COLL,... (or ^INIT to exclude) the
// subsystems, ROCENANTE_DEBUG_FILE a file instead of stderr (%h host, %p pid).
#pragma once

#include <cstdint>
#include <string>

namespace rcn {

enum LogLevel { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogTrace = 4 };

enum LogSubsys : uint32_t {
  RCN_LOG_INIT = 1u << 0,
  RCN_LOG_COLL = 1u << 1,
  RCN_LOG_BOOTSTRAP = 1u << 2,
  RCN_LOG_TRANSPORT = 1u << 3,
  RCN_LOG_TOPO = 1u << 4,
  RCN_LOG_TUNE = 1u << 5,
  RCN_LOG_SHIM = 1u << 6,
  RCN_LOG_PROXY = 1u << 7,
  RCN_LOG_ENV = 1u << 8,
  RCN_LOG_ALL = ~0u
};

// True when a message of this level and subsystem would be printed.
bool logEnabled(LogLevel level, uint32_t subsys);
void logMessage(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// The last WARN logged by this thread, for rcnGetLastError: a buffer of the
// thread's own, valid as long as the thread (a later warning rewrites it).
const char* lastErrorText();
void clearLastError();
// Makes text what rcnGetLastError returns on this thread, for a refusal that
// is logged at INFO (a query's answer) rather than as a warning.
void setLastError(const std::string& text);

// Re-reads ROCENANTE_DEBUG* (tests change them between cases).
void logReinit();

// The library's version, once a process, at ROCENANTE_DEBUG=VERSION
// and above (as NCCL prints its version at its first communicator).
void logVersionOnce();

}  // namespace rcn

using rcn::RCN_LOG_ALL;
using rcn::RCN_LOG_BOOTSTRAP;
using rcn::RCN_LOG_COLL;
using rcn::RCN_LOG_ENV;
using rcn::RCN_LOG_INIT;
using rcn::RCN_LOG_PROXY;
using rcn::RCN_LOG_SHIM;
using rcn::RCN_LOG_TOPO;
using rcn::RCN_LOG_TRANSPORT;
using rcn::RCN_LOG_TUNE;

#define RCN_WARN(subsys, ...) ::rcn::logMessage(::rcn::kLogWarn, subsys, __FILE__, __LINE__, __VA_ARGS__)
#define RCN_INFO(subsys, ...)                                                              \
  do {                                                                                     \
    if (::rcn::logEnabled(::rcn::kLogInfo, subsys))                                        \
      ::rcn::logMessage(::rcn::kLogInfo, subsys, __FILE__, __LINE__, __VA_ARGS__);         \
  } while (0)
#define RCN_TRACE_LOG(subsys, ...)                                                         \
  do {                                                                                     \
    if (::rcn::logEnabled(::rcn::kLogTrace, subsys))                                       \
      ::rcn::logMessage(::rcn::kLogTrace, subsys, __FILE__, __LINE__, __VA_ARGS__);        \
  } while (0)
