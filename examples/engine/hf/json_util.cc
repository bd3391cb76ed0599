#include "json_util.h"

#include <fstream>
#include <sstream>

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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw EngineError(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  return parseJson(s.data(), s.data() + s.size(), path);
}

Json parseJson(const char* begin, const char* end, const std::string& what) {
  try {
    return Json::parse(begin, end);
  } catch (const Json::exception& e) {
    throw EngineError(what + ": not valid JSON (" + e.what() + ")");
  }
}

int requireInt(const Json& obj, const char* key, const std::string& what) {
  const Json* v = find(obj, key);
  if (!v) fieldError(what, key, "is missing");
  if (!v->is_number_integer()) fieldError(what, key, "is not an integer");
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
