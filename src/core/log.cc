#include "core/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "core/params.h"

namespace rcn {
namespace {

struct LogState {
  std::once_flag once;
  std::mutex mutex;
  std::atomic<int> level{kLogWarn};
  std::atomic<uint32_t> subsys{RCN_LOG_ALL};
  FILE* out = stderr;
  char host[64] = "";
};

LogState& state() {
  static LogState s;
  return s;
}

thread_local std::string tlsLastError;

int parseLevel(const std::string& text) {
  if (text == "NONE") return kLogNone;
  if (text == "VERSION") return kLogVersion;
  if (text == "INFO") return kLogInfo;
  if (text == "TRACE") return kLogTrace;
  return kLogWarn;
}

uint32_t subsysBit(const std::string& name) {
  static const struct { const char* name; uint32_t bit; } names[] = {
      {"INIT", RCN_LOG_INIT}, {"COLL", RCN_LOG_COLL}, {"BOOTSTRAP", RCN_LOG_BOOTSTRAP},
      {"TRANSPORT", RCN_LOG_TRANSPORT}, {"TOPO", RCN_LOG_TOPO}, {"TUNE", RCN_LOG_TUNE},
      {"SHIM", RCN_LOG_SHIM}, {"PROXY", RCN_LOG_PROXY}, {"ENV", RCN_LOG_ENV}, {"ALL", RCN_LOG_ALL}};
  for (const auto& n : names)
    if (strcasecmp(n.name, name.c_str()) == 0) return n.bit;
  return 0;
}

// "INIT,COLL" selects those; "^INIT" selects all but those, as NCCL does.
uint32_t parseSubsys(const std::string& text) {
  bool invert = !text.empty() && text[0] == '^';
  uint32_t mask = 0;
  size_t start = invert ? 1 : 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    mask |= subsysBit(text.substr(start, comma - start));
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

void configure(LogState& s) {
  s.level = parseLevel(paramStr(ParamId::Debug));
  s.subsys = parseSubsys(paramStr(ParamId::DebugSubsys));
  gethostname(s.host, sizeof s.host - 1);
  char* dot = strchr(s.host, '.');
  if (dot) *dot = '\0';
  std::string file = paramStr(ParamId::DebugFile);
  if (s.out != stderr) fclose(s.out);
  s.out = stderr;
  if (!file.empty()) {
    FILE* f = fopen(expandFileName(file, s.host).c_str(), "a");
    if (f) s.out = f;
  }
}

void ensureConfigured() {
  LogState& s = state();
  std::call_once(s.once, [&] { configure(s); });
}

const char* levelName(LogLevel level) {
  switch (level) {
    case kLogWarn: return "WARN";
    case kLogInfo: return "INFO";
    case kLogTrace: return "TRACE";
    default: return "VERSION";
  }
}

}  // namespace

bool logEnabled(LogLevel level, uint32_t subsys) {
  ensureConfigured();
  LogState& s = state();
  return level <= s.level.load(std::memory_order_relaxed) &&
         (subsys & s.subsys.load(std::memory_order_relaxed)) != 0;
}

void logMessage(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  char text[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  if (level == kLogWarn) tlsLastError = text;
  if (!logEnabled(level, subsys)) return;
  LogState& s = state();
  long tid = syscall(SYS_gettid);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (level == kLogTrace) {
    const char* base = strrchr(file, '/');
    fprintf(s.out, "%s:%d:%ld ROCENANTE TRACE %s:%d %s\n", s.host, getpid(), tid,
            base ? base + 1 : file, line, text);
  } else {
    fprintf(s.out, "%s:%d:%ld ROCENANTE %s %s\n", s.host, getpid(), tid, levelName(level), text);
  }
  fflush(s.out);
}

const char* lastErrorText() { return tlsLastError.c_str(); }
void clearLastError() { tlsLastError.clear(); }

void logReinit() {
  ensureConfigured();
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  configure(s);
}

}  // namespace rcn
