// SPDX-License-Identifier: BSD-3-Clause
#include "core/params.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#include "core/log.h"
#include "core/strings.h"

extern char** environ;

namespace rcn {

bool firstTimeInProcess(const std::string& key) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mutex);
  return seen.insert(key).second;
}

namespace {

constexpr const char* kPrefix = "ROCENANTE_";

const ParamInfo& info(ParamId id) { return paramTable()[static_cast<size_t>(id)]; }

// The environment's text for a parameter; null when it is unset.
const char* envText(ParamId id) { return getenv((std::string(kPrefix) + info(id).name).c_str()); }

// The environment's text for a parameter, or its default.
std::string rawText(ParamId id) {
  const char* value = envText(id);
  return value ? std::string(value) : std::string(info(id).defaultText);
}

void warnOnce(ParamId id, const std::string& why) {
  if (!firstTimeInProcess(std::string("malformed ") + info(id).name)) return;
  RCN_WARN(RCN_LOG_ENV, "ROCENANTE_%s: %s (communicator creation refuses it; read as the default '%s' until then)",
           info(id).name, why.c_str(), info(id).defaultText);
}

// An INT parameter's value: it parses and lies within the row's range.
bool intValue(const ParamInfo& p, const std::string& text, int64_t* value, std::string* why) {
  if (!parseIntText(text, value, why)) return false;
  const std::string range = p.allowed;
  const size_t dots = range.find("..");
  if (dots == std::string::npos) return true;
  int64_t lo = 0, hi = 0;
  std::string unused;
  parseIntText(range.substr(0, dots), &lo, &unused);
  parseIntText(range.substr(dots + 2), &hi, &unused);
  if (*value >= lo && *value <= hi) return true;
  *why = "'" + trim(text) + "' is outside " + range;
  return false;
}

// A STR parameter's value is one of the row's choices, or empty (its reader
// takes that as the default, or refuses it by name).
bool strAllowed(const ParamInfo& p, const std::string& text, std::string* why) {
  const std::string value = trim(text);
  const std::string choices = p.allowed;
  if (choices.empty() || value.empty()) return true;
  std::istringstream list(choices);
  std::string shown;
  for (std::string choice; std::getline(list, choice, '|');) {
    if (value == choice) return true;
    shown += (shown.empty() ? "" : ", ") + choice;
  }
  *why = "'" + value + "' is not one of " + shown;
  return false;
}

bool validateOne(const ParamInfo& p, const std::string& text, std::string* why) {
  if (p.kind == ParamKind::INT) {
    int64_t v;
    return intValue(p, text, &v, why);
  }
  if (p.kind == ParamKind::BOOL) {
    bool v;
    return parseBoolText(text, &v, why);
  }
  return strAllowed(p, text, why);
}

}  // namespace

const std::vector<ParamInfo>& paramTable() {
  static const std::vector<ParamInfo> table = {
#define RCN_PARAM(id, name, kind, def, allowed, doc) {ParamId::id, name, ParamKind::kind, def, allowed, doc},
#include "core/params.def"
#include "core/params_test.def"
#undef RCN_PARAM
  };
  return table;
}

bool parseIntText(const std::string& raw, int64_t* value, std::string* why) {
  std::string text = trim(raw);
  if (text.empty()) {
    *why = "empty value, expected an integer";
    return false;
  }
  // Decimal, or hexadecimal after 0x: never octal, so "010" is ten.
  const size_t digits = text[0] == '-' || text[0] == '+' ? 1 : 0;
  const bool hex = text.compare(digits, 2, "0x") == 0 || text.compare(digits, 2, "0X") == 0;
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(text.c_str(), &end, hex ? 16 : 10);
  if (end == text.c_str()) {
    *why = "'" + raw + "' is not an integer";
    return false;
  }
  if (errno == ERANGE) {
    *why = "'" + raw + "' is out of range";
    return false;
  }
  int64_t scale = 1;
  if (*end == 'K' || *end == 'k') scale = 1ll << 10;
  else if (*end == 'M' || *end == 'm') scale = 1ll << 20;
  else if (*end == 'G' || *end == 'g') scale = 1ll << 30;
  if (scale != 1) ++end;
  if (*end != '\0') {
    *why = "'" + raw + "' has trailing characters; expected an integer with an optional K/M/G suffix";
    return false;
  }
  if (v > INT64_MAX / scale || v < INT64_MIN / scale) {
    *why = "'" + raw + "' is out of range";
    return false;
  }
  *value = v * scale;
  return true;
}

bool parseBoolText(const std::string& raw, bool* value, std::string* why) {
  std::string text = trim(raw);
  for (const char* t : {"1", "true", "yes", "on"})
    if (strcasecmp(text.c_str(), t) == 0) return *value = true, true;
  for (const char* f : {"0", "false", "no", "off"})
    if (strcasecmp(text.c_str(), f) == 0) return *value = false, true;
  *why = "'" + raw + "' is not a boolean (use 0/1, true/false, yes/no, on/off)";
  return false;
}

int64_t paramDefaultInt(ParamId id) {
  int64_t value = 0;
  std::string why;
  parseIntText(info(id).defaultText, &value, &why);
  return value;
}

bool paramIsSet(ParamId id) { return envText(id) != nullptr; }

int64_t paramInt(ParamId id) {
  int64_t value = 0;
  std::string why;
  if (intValue(info(id), rawText(id), &value, &why)) return value;
  warnOnce(id, why);
  return paramDefaultInt(id);
}

bool paramBool(ParamId id) {
  bool value = false;
  std::string why;
  if (parseBoolText(rawText(id), &value, &why)) return value;
  warnOnce(id, why);
  parseBoolText(info(id).defaultText, &value, &why);
  return value;
}

// Not checked against the row's choices here: paramValidate refused a bad
// value at creation, and readers that can fail call paramChoice.
std::string paramStr(ParamId id) { return trim(rawText(id)); }

namespace {

// The variable's trimmed text, or false when it is unset or empty.
bool setText(ParamId id, std::string* text) {
  const char* value = envText(id);
  *text = value ? trim(value) : std::string();
  return !text->empty();
}

rcnResult_t refuse(ParamId id, const std::string& why) {
  RCN_WARN(RCN_LOG_ENV, "ROCENANTE_%s: %s", info(id).name, why.c_str());
  return rcnInvalidArgument;
}

}  // namespace

rcnResult_t paramIntIfSet(ParamId id, bool* set, int64_t* value) {
  std::string text, why;
  *set = setText(id, &text);
  if (*set && !intValue(info(id), text, value, &why)) return refuse(id, why);
  return rcnSuccess;
}

rcnResult_t paramBoolIfSet(ParamId id, bool* set, bool* value) {
  std::string text, why;
  *set = setText(id, &text);
  if (*set && !parseBoolText(text, value, &why)) return refuse(id, why);
  return rcnSuccess;
}

rcnResult_t paramChoice(ParamId id, std::string* value) {
  const ParamInfo& p = info(id);
  *value = paramStr(id);
  if (value->empty()) *value = p.defaultText;
  std::string why;
  return strAllowed(p, *value, &why) ? rcnSuccess : refuse(id, why);
}

rcnResult_t paramValidate() {
  rcnResult_t result = rcnSuccess;
  for (char** env = environ; env && *env; ++env) {
    const char* entry = *env;
    if (strncmp(entry, kPrefix, strlen(kPrefix)) != 0) continue;
    const char* eq = strchr(entry, '=');
    if (!eq) continue;
    std::string name(entry + strlen(kPrefix), eq - entry - strlen(kPrefix));
    const ParamInfo* found = nullptr;
    for (const ParamInfo& p : paramTable())
      if (name == p.name) found = &p;
    if (!found) {
      // Unknown names are likely typos; they change nothing, so warn only,
      // once a process (every communicator's creation validates).
      if (firstTimeInProcess("unknown " + name))
        RCN_WARN(RCN_LOG_ENV, "ROCENANTE_%s is not a rocenante parameter (see docs/PARAMS.md); ignored",
                 name.c_str());
      continue;
    }
    std::string why;
    if (!validateOne(*found, eq + 1, &why)) {
      RCN_WARN(RCN_LOG_ENV, "ROCENANTE_%s: %s", found->name, why.c_str());
      result = rcnInvalidArgument;
    }
  }
  return result;
}

std::string paramAgreementText() {
  static const ParamId agreed[] = {ParamId::Disable,
                                   ParamId::Force,
                                   ParamId::MaxBytes,
                                   ParamId::AllGatherMaxBytes,
                                   ParamId::ReduceScatterMaxBytes,
                                   ParamId::Transport,
                                   ParamId::Wire,
                                   ParamId::Gdr,
                                   ParamId::Backend,
                                   ParamId::MaxBlocks,
                                   ParamId::Threads,
                                   ParamId::SelfTest,
                                   ParamId::Policy,
                                   ParamId::LlMaxBytes,
                                   ParamId::ProxyLlMaxBytes,
                                   ParamId::ProxyThreads,
                                   ParamId::DeviceWindowBytes,
                                   ParamId::ProxyFirstCall};
  std::ostringstream text;
  for (ParamId id : agreed) {  // as every reader sees it: trimmed, and a string set but empty is its default
    std::string value = trim(rawText(id));
    if (value.empty() && info(id).kind == ParamKind::STR) value = info(id).defaultText;
    text << info(id).name << '=' << value << ';';
  }
  return text.str();
}

}  // namespace rcn
