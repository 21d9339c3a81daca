// JSON for untrusted files (safetensors headers, index.json, config.json, tokenizer.json, data
// records, manifests): parsing with a nesting limit that notices a key repeated in one object
// (nlohmann keeps the last silently; a tensor listed twice is exactly the mistake to report), and
// the quoting that keeps hostile names from breaking error messages.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace shardtune::common {

struct StrictJson {
  nlohmann::json value;
  std::optional<std::pair<int, std::string>> duplicate;  // (depth, key) of the first repeated key
  bool too_deep = false;  // arrays or objects nested beyond max_depth were left out of `value`
};

// Untrusted files nest this deep at most; deeper ones are refused (a 400 KB "[[[[..." would
// otherwise make every later copy, dump or destruction recurse through the stack).
inline constexpr int kMaxJsonDepth = 64;

// Parses [begin, end) (nlohmann's parser itself does not recurse). Syntax errors throw
// nlohmann's exceptions for the caller to word.
StrictJson parse_json_strict(const char* begin, const char* end, int max_depth = kMaxJsonDepth);

// A string as JSON spells it: quoted, control characters escaped.
std::string json_quoted(std::string_view s);

// "an array", "a number": a JSON value's type for an error message.
std::string described(const nlohmann::json& v);

}  // namespace shardtune::common
