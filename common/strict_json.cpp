// Strict JSON parsing and quoting for error messages.
#include "common/strict_json.h"

#include <fmt/format.h>

#include <set>
#include <vector>

namespace shardtune::common {

using nlohmann::json;

StrictJson parse_json_strict(const char* begin, const char* end, int max_depth) {
  StrictJson out;
  std::vector<std::set<std::string>> open_objects;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    if (opens && depth >= max_depth) {
      out.too_deep = true;
      return false;  // left out, with everything inside it
    }
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && depth <= max_depth && !open_objects.empty() && !out.duplicate) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) out.duplicate.emplace(depth, key);
    }
    return true;
  };
  out.value = json::parse(begin, end, on_event);
  return out;
}

std::string json_quoted(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string described(const json& v) {
  return v.is_object() || v.is_array() ? fmt::format("an {}", v.type_name()) : fmt::format("a {}", v.type_name());
}

}  // namespace shardtune::common
