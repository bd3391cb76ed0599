// SPDX-License-Identifier: BSD-3-Clause
// Reading JSON files with errors that name the file and the field. Internal
// to rcn_engine_hf: the public headers do not expose nlohmann-json.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace engine::hf {

using Json = nlohmann::json;

// Parses `path`; throws EngineError naming the file when it is missing, not
// a regular file, over kMaxJsonBytes, or not JSON.
constexpr size_t kMaxJsonBytes = size_t(512) << 20;  // tokenizer.json files run to tens of MB
Json readJsonFile(const std::string& path);

// Parses `text` (what: the file or header it came from, for messages);
// onEvent, if any, sees the parse as nlohmann's callback does. Nesting past
// kMaxJsonDepth levels is refused (tokenizer.json and config.json use a few).
constexpr int kMaxJsonDepth = 128;
Json parseJson(const char* begin, const char* end, const std::string& what,
               const Json::parser_callback_t& onEvent = nullptr);

// The same, refusing a top-level key that appears twice (a safetensors
// header naming one tensor twice: nlohmann would keep the last silently).
Json parseJsonUniqueKeys(const char* begin, const char* end, const std::string& what);

// obj[key] as an int / float / string / bool; throws naming `what` and the key
// when it is absent or of the wrong type.
int requireInt(const Json& obj, const char* key, const std::string& what);
double requireNumber(const Json& obj, const char* key, const std::string& what);
std::string requireString(const Json& obj, const char* key, const std::string& what);

// The same with a default when the key is absent or null.
int intOr(const Json& obj, const char* key, int fallback, const std::string& what);
double numberOr(const Json& obj, const char* key, double fallback, const std::string& what);
bool boolOr(const Json& obj, const char* key, bool fallback, const std::string& what);

}  // namespace engine::hf
