// JSON for untrusted files (safetensors headers, index.json, config.json): parsing that notices a
// key repeated in one object (nlohmann keeps the last silently; a tensor listed twice is exactly
// the mistake to report), and the quoting that keeps hostile names from breaking error messages.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace shardtune::checkpoint {

struct StrictJson {
  nlohmann::json value;
  std::optional<std::pair<int, std::string>> duplicate;  // (depth, key) of the first repeated key
};

// Parses [begin, end). Syntax errors throw nlohmann's exceptions for the caller to word.
StrictJson parse_json_strict(const char* begin, const char* end);

// A string as JSON spells it: quoted, control characters escaped.
std::string json_quoted(std::string_view s);

// "an array", "a number": a JSON value's type for an error message.
std::string described(const nlohmann::json& v);

}  // namespace shardtune::checkpoint
