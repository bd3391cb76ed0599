// SPDX-License-Identifier: BSD-3-Clause
#include "json_util.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "input_file.h"
#include "model.h"

namespace engine::hf {

namespace {

[[noreturn]] void fieldError(const std::string& what, const char* key, const std::string& problem) {
  throw EngineError(what + ": field \"" + key + "\" " + problem);
}

const Json* find(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

Json readJsonFile(const std::string& path) {
  size_t bytes = 0;
  const int fd = openRegularFile(path, &bytes);
  std::string text;
  text.reserve(std::min(bytes, kMaxJsonBytes));
  for (char buffer[65536];;) {  // to the end, whatever stat said: a file may grow while read
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw EngineError(path + ": read failed (" + std::strerror(err) + ")");
    }
    text.append(buffer, size_t(n));
    if (text.size() > kMaxJsonBytes) {
      ::close(fd);
      throw EngineError(path + ": more than the " + std::to_string(kMaxJsonBytes >> 20) + " MB a JSON file may have");
    }
  }
  ::close(fd);
  return parseJson(text.data(), text.data() + text.size(), path);
}

Json parseJson(const char* begin, const char* end, const std::string& what, const Json::parser_callback_t& onEvent) {
  // Whatever copies, prints or walks the tree later recurses once a level:
  // a file nested a million deep would overflow the stack there.
  const auto bounded = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth >= kMaxJsonDepth)  // the top level is depth 0
      throw EngineError(what + ": nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return onEvent ? onEvent(depth, event, parsed) : true;
  };
  try {
    return Json::parse(begin, end, bounded);
  } catch (const Json::exception& e) {
    throw EngineError(what + ": not valid JSON (" + e.what() + ")");
  }
}

Json parseJsonUniqueKeys(const char* begin, const char* end, const std::string& what) {
  std::set<std::string> keys;
  return parseJson(begin, end, what, [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second)
      throw EngineError(what + ": key \"" + parsed.get<std::string>() + "\" appears twice");
    return true;
  });
}

int requireInt(const Json& obj, const char* key, const std::string& what) {
  const Json* v = find(obj, key);
  if (!v) fieldError(what, key, "is missing");
  if (!v->is_number_integer()) fieldError(what, key, "is not an integer");
  // An unsigned value past 2^63 would wrap to a negative long long.
  if (v->is_number_unsigned() && v->get<unsigned long long>() >= (1ULL << 31)) fieldError(what, key, "is out of range");
  const long long n = v->get<long long>();
  if (n < -(1LL << 31) || n >= (1LL << 31)) fieldError(what, key, "is out of range");
  return int(n);
}

double requireNumber(const Json& obj, const char* key, const std::string& what) {
  const Json* v = find(obj, key);
  if (!v) fieldError(what, key, "is missing");
  if (!v->is_number()) fieldError(what, key, "is not a number");
  return v->get<double>();
}

std::string requireString(const Json& obj, const char* key, const std::string& what) {
  const Json* v = find(obj, key);
  if (!v) fieldError(what, key, "is missing");
  if (!v->is_string()) fieldError(what, key, "is not a string");
  return v->get<std::string>();
}

int intOr(const Json& obj, const char* key, int fallback, const std::string& what) {
  return find(obj, key) ? requireInt(obj, key, what) : fallback;
}

double numberOr(const Json& obj, const char* key, double fallback, const std::string& what) {
  return find(obj, key) ? requireNumber(obj, key, what) : fallback;
}

bool boolOr(const Json& obj, const char* key, bool fallback, const std::string& what) {
  const Json* v = find(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fieldError(what, key, "is not true or false");
  return v->get<bool>();
}

}  // namespace engine::hf
