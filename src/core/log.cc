// SPDX-License-Identifier: BSD-3-Clause
#include "core/log.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/user_file.h"
#include "rocenante/rocenante.h"

namespace rcn {
namespace {

struct LogState {
  std::once_flag once;
  std::mutex mutex;
  std::atomic<int> level{kLogWarn};
  std::atomic<uint32_t> subsys{RCN_LOG_ALL};
  FILE* out = stderr;
  bool outIsPipe = false;  // only a pipe or socket can raise SIGPIPE
  char host[64] = "";
};

// Makes f the log's output, noting whether writes to it need SIGPIPE blocked.
void setOut(LogState& s, FILE* f) {
  struct stat st;
  s.out = f;
  s.outIsPipe = fstat(fileno(f), &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

LogState& state() {
  static LogState s;
  return s;
}

// A fixed buffer, not a string: rcnGetLastError and ncclGetLastError hand
// out the pointer, which must stay valid when a later warning replaces the text.
thread_local char tlsLastError[1024];

// The level named by text (any case, as NCCL reads NCCL_DEBUG); -1 for none.
int parseLevel(const std::string& text) {
  static const struct { const char* name; int level; } names[] = {
      {"NONE", kLogNone}, {"VERSION", kLogVersion}, {"WARN", kLogWarn}, {"INFO", kLogInfo}, {"TRACE", kLogTrace}};
  for (const auto& n : names)
    if (strcasecmp(n.name, text.c_str()) == 0) return n.level;
  return -1;
}

struct SubsysName {
  const char* name;
  uint32_t bit;
};
const SubsysName kSubsystems[] = {
    {"INIT", RCN_LOG_INIT}, {"COLL", RCN_LOG_COLL}, {"BOOTSTRAP", RCN_LOG_BOOTSTRAP},
    {"TRANSPORT", RCN_LOG_TRANSPORT}, {"TOPO", RCN_LOG_TOPO}, {"TUNE", RCN_LOG_TUNE},
    {"SHIM", RCN_LOG_SHIM}, {"PROXY", RCN_LOG_PROXY}, {"ENV", RCN_LOG_ENV}, {"ALL", RCN_LOG_ALL}};

uint32_t subsysBit(const std::string& name) {
  for (const SubsysName& n : kSubsystems)
    if (strcasecmp(n.name, name.c_str()) == 0) return n.bit;
  return 0;
}

// "INIT,COLL,...,ALL": the names subsysBit knows, for messages.
std::string subsysNames() {
  std::string names;
  for (const SubsysName& n : kSubsystems) names += std::string(names.empty() ? "" : ",") + n.name;
  return names;
}

// "INIT,COLL" selects those; "^INIT" selects all but those, as NCCL does.
// Names it does not know go to `unknown` (comma-separated).
uint32_t parseSubsys(const std::string& text, std::string* unknown) {
  bool invert = !text.empty() && text[0] == '^';
  uint32_t mask = 0;
  size_t start = invert ? 1 : 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string name = text.substr(start, comma - start);
    const uint32_t bit = subsysBit(name);
    if (bit == 0 && !name.empty()) *unknown += (unknown->empty() ? "" : ",") + name;
    mask |= bit;
    start = comma + 1;
  }
  return invert ? ~mask : mask;
}

// %h becomes the host name, %p the pid.
std::string expandFileName(const std::string& pattern, const char* host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') { out += host; continue; }
      if (c == 'p') { out += std::to_string(getpid()); continue; }
      out += '%';
    }
    out += pattern[i];
  }
  return out;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case kLogWarn: return "WARN";
    case kLogInfo: return "INFO";
    case kLogTrace: return "TRACE";
    default: return "VERSION";
  }
}

// host:pid:tid, the level, where (TRACE: "file:line ", else ""), the text;
// false if the line did not reach the file.
bool printLine(FILE* out, const char* host, const char* level, const char* where, const char* text) {
  fprintf(out, "%s:%d:%ld ROCENANTE %s %s%s\n", host, getpid(), long(syscall(SYS_gettid)), level, where, text);
  return fflush(out) == 0;
}

// One log line. A log file that fails (a FIFO whose reader left, a full
// disk) is dropped for stderr, with a line saying why, rather than losing
// every later line; a FIFO's reader leaving must not kill the program.
void writeLine(LogState& s, LogLevel level, const char* text, const std::string& where = "") {
  std::optional<SigpipeBlocked> noSigpipe;  // a few system calls, so only where SIGPIPE can come
  if (s.outIsPipe) noSigpipe.emplace();
  if (printLine(s.out, s.host, levelName(level), where.c_str(), text) || s.out == stderr) return;
  const int err = errno;
  if (err == EINTR || err == EAGAIN) {  // a signal cut the write short: this line only is lost
    clearerr(s.out);
    return;
  }
  const std::string why = std::string("ROCENANTE_DEBUG_FILE: write failed (") + strerror(err) + "); logging to stderr";
  fclose(s.out);
  setOut(s, stderr);
  printLine(s.out, s.host, levelName(kLogWarn), "", why.c_str());
  printLine(s.out, s.host, levelName(level), where.c_str(), text);
}

// Reads the three logging parameters. What it cannot use is warned about
// here, directly: logMessage would wait for this very configuration.
void configure(LogState& s) {
  std::vector<std::string> problems;
  const std::string levelText = paramStr(ParamId::Debug);
  const int level = parseLevel(levelText);
  if (level < 0)
    problems.push_back("ROCENANTE_DEBUG=" + levelText + " is not a level (NONE, VERSION, WARN, INFO, TRACE); using WARN");
  s.level = level < 0 ? kLogWarn : level;
  std::string unknown;
  s.subsys = parseSubsys(paramStr(ParamId::DebugSubsys), &unknown);
  if (!unknown.empty())
    problems.push_back("ROCENANTE_DEBUG_SUBSYS: unknown subsystem(s) " + unknown +
                       " ignored (known: " + subsysNames() + ")");
  gethostname(s.host, sizeof s.host - 1);
  char* dot = strchr(s.host, '.');
  if (dot) *dot = '\0';
  std::string file = paramStr(ParamId::DebugFile);
  if (s.out != stderr) fclose(s.out);
  setOut(s, stderr);
  if (!file.empty()) {
    std::string why;
    FILE* f = openOutputFile(expandFileName(file, s.host), true, &why);
    if (f) setOut(s, f);
    else problems.push_back("ROCENANTE_DEBUG_FILE: cannot open " + why + "; logging to stderr");
  }
  if (s.level >= kLogWarn)
    for (const std::string& p : problems) writeLine(s, kLogWarn, p.c_str());
}

void ensureConfigured() {
  LogState& s = state();
  std::call_once(s.once, [&] { configure(s); });
}

}  // namespace

// Warnings print whatever ROCENANTE_DEBUG_SUBSYS says: it narrows the
// detail (INFO, TRACE), and a typo in it must not hide why a call failed.
bool logEnabled(LogLevel level, uint32_t subsys) {
  ensureConfigured();
  LogState& s = state();
  return level <= s.level.load(std::memory_order_relaxed) &&
         (level <= kLogWarn || (subsys & s.subsys.load(std::memory_order_relaxed)) != 0);
}

void logVersionOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!logEnabled(kLogVersion, RCN_LOG_ALL)) return;
    logMessage(kLogVersion, RCN_LOG_INIT, __FILE__, __LINE__, "rocenante version %d.%d.%d", ROCENANTE_MAJOR,
               ROCENANTE_MINOR, ROCENANTE_PATCH);
  });
}

void logMessage(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  char text[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  if (level == kLogWarn) setLastError(text);
  if (!logEnabled(level, subsys)) return;
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const char* base = strrchr(file, '/');
  const std::string where = level == kLogTrace ? std::string(base ? base + 1 : file) + ":" + std::to_string(line) + " " : "";
  writeLine(s, level, text, where);
}

const char* lastErrorText() { return tlsLastError; }
void clearLastError() { tlsLastError[0] = '\0'; }
void setLastError(const std::string& text) { snprintf(tlsLastError, sizeof tlsLastError, "%s", text.c_str()); }

void logReinit() {
  ensureConfigured();
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  configure(s);
}

}  // namespace rcn
