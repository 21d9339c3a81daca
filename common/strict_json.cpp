// Strict JSON parsing and quoting for error messages.
#include "common/strict_json.h"

#include <fmt/format.h>

#include <set>
#include <vector>

namespace shardtune::common {

using nlohmann::json;

namespace {

// nlohmann's DOM builder, watched: a key repeated in one object is noted, and nesting deeper than
// the limit stops the parse. (A parser callback would do the same, but nlohmann 3.11's callback
// parser rescans an array's elements at the end of each object in it: quadratic in the records of
// a JSON-array data file.)
class StrictSax {
 public:
  StrictSax(json& result, StrictJson& out, int max_depth) : dom_(result, true), out_(out), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (!enter()) return false;
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (!out_.duplicate && !keys_.back().insert(k).second) out_.duplicate.emplace(depth_, k);
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return enter() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  // A template, as nlohmann's own: the builder throws the exception as the type it is given, so a
  // base-class parameter here would slice a parse_error into a plain exception.
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& e) {
    return dom_.parse_error(position, token, e);  // throws it
  }

 private:
  bool enter() {
    if (++depth_ <= max_depth_) return true;
    out_.too_deep = true;
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  StrictJson& out_;
  int max_depth_;
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // of each open object
};

}  // namespace

StrictJson parse_json_strict(const char* begin, const char* end, int max_depth) {
  StrictJson out;
  StrictSax sax(out.value, out, max_depth);
  json::sax_parse(begin, end, &sax);
  return out;
}

std::string json_quoted(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string described(const json& v) {
  return v.is_object() || v.is_array() ? fmt::format("an {}", v.type_name()) : fmt::format("a {}", v.type_name());
}

}  // namespace shardtune::common
