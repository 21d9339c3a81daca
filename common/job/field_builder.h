// Builds FieldSpecs from member pointers: the reading, writing and checking code for each field
// type lives here once, so the schema itself is one declarative line per field.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <utility>

#include "common/job/diagnostics.h"
#include "common/job/schema.h"

namespace shardtune::job::detail {

// Job-file spellings of each enum; specialised in job_schema.cpp.
template <class E>
struct EnumNames;

inline std::string node_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

inline std::string article(std::string_view type_name) {
  return fmt::format("{} {}", type_name.front() == 'i' ? "an" : "a", type_name);
}

// Reading and writing one field type; each specialisation knows its TOML type.
template <class T, class Enable = void>
struct FieldType;

template <>
struct FieldType<bool> {
  static constexpr const char* kName = "boolean";
  static std::optional<bool> read(const toml::node& n) { return n.value_exact<bool>(); }
  static std::string literal(bool v) { return v ? "true" : "false"; }
};

template <>
struct FieldType<int64_t> {
  static constexpr const char* kName = "integer";
  static std::optional<int64_t> read(const toml::node& n) { return n.value_exact<int64_t>(); }
  static std::string literal(int64_t v) { return std::to_string(v); }
};

template <>
struct FieldType<double> {
  static constexpr const char* kName = "float";
  static std::optional<double> read(const toml::node& n) {
    if (n.is_integer()) return static_cast<double>(*n.value_exact<int64_t>());
    return n.value_exact<double>();
  }
  // Shortest text that reads back to the same double ("0.05", "1e-05"), always a TOML float.
  static std::string literal(double v) {
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eni") == std::string::npos) s += ".0";
    return s;
  }
};

template <>
struct FieldType<std::string> {
  static constexpr const char* kName = "string";
  static std::optional<std::string> read(const toml::node& n) { return n.value_exact<std::string>(); }
  static std::string literal(const std::string& v) {
    // Basic strings with escapes: one line, whatever the value holds.
    std::string out = "\"";
    for (unsigned char c : v) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          if (c < 0x20 || c == 0x7f) out += fmt::format("\\u{:04X}", c);
          else out += static_cast<char>(c);
      }
    }
    return out + "\"";
  }
};

template <>
struct FieldType<std::vector<std::string>> {
  static constexpr const char* kName = "list of strings";
  static std::optional<std::vector<std::string>> read(const toml::node& n) {
    const toml::array* arr = n.as_array();
    if (arr == nullptr) return std::nullopt;
    std::vector<std::string> out;
    for (const toml::node& item : *arr) {
      auto s = item.value_exact<std::string>();
      if (!s) return std::nullopt;
      out.push_back(*s);
    }
    return out;
  }
  static std::string literal(const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + FieldType<std::string>::literal(v[i]);
    return out + "]";
  }
};

template <class E>
struct FieldType<E, std::enable_if_t<std::is_enum_v<E>>> {
  static constexpr const char* kName = "string";
  static std::optional<E> read(const toml::node& n) {
    auto s = n.value_exact<std::string>();
    if (!s) return std::nullopt;
    for (const auto& [value, name] : EnumNames<E>::kNames)
      if (*s == name) return value;
    return std::nullopt;
  }
  static std::string literal(E v) { return FieldType<std::string>::literal(std::string(name_of(v))); }
  static std::string_view name_of(E v) {
    for (const auto& [value, name] : EnumNames<E>::kNames)
      if (value == v) return name;
    return "?";
  }
  static std::vector<std::string> choices() {
    std::vector<std::string> out;
    for (const auto& [value, name] : EnumNames<E>::kNames) out.emplace_back(name);
    return out;
  }
};

// A handle on a field being declared, for adding a constraint.
template <class Sec, class T>
class FieldHandle {
 public:
  FieldHandle(FieldSpec& spec, Sec Job::*section, T Sec::*member)
      : spec_(spec), section_(section), member_(member) {}

  // A constraint: `ok` says whether a value is allowed, `text` says what is allowed.
  template <class Pred>
  FieldHandle& require(std::string text, Pred ok) {
    spec_.constraint = text;
    auto section = section_;
    auto member = member_;
    spec_.check = [=](const Job& job) -> std::optional<std::string> {
      const T& v = job.*section.*member;
      if (ok(v)) return std::nullopt;
      return fmt::format("must be {}, got {}", text, FieldType<T>::literal(v));
    };
    return *this;
  }
  FieldHandle& at_least(T lo) {
    return require(fmt::format(">= {}", FieldType<T>::literal(lo)), [lo](const T& v) { return v >= lo; });
  }
  FieldHandle& in_range(T lo, T hi) {
    return require(fmt::format("between {} and {}", FieldType<T>::literal(lo), FieldType<T>::literal(hi)),
                   [lo, hi](const T& v) { return v >= lo && v <= hi; });
  }
  FieldHandle& positive() {
    return require("> 0", [](const T& v) { return v > T{}; });
  }

 private:
  FieldSpec& spec_;
  Sec Job::*section_;
  T Sec::*member_;
};

template <class Sec>
class SectionBuilder {
 public:
  SectionBuilder(std::vector<SectionSpec>& schema, std::string name, std::string doc, Sec Job::*section)
      : spec_(schema.emplace_back(SectionSpec{std::move(name), std::move(doc), {}})), section_(section) {}

  template <class T>
  FieldHandle<Sec, T> field(std::string key, T Sec::*member, std::string doc) {
    FieldSpec& f = spec_.fields.emplace_back();
    f.section = spec_.name;
    f.key = std::move(key);
    f.doc = std::move(doc);
    f.type_name = FieldType<T>::kName;
    f.bare_word_ok = std::is_same_v<T, std::string> || std::is_enum_v<T>;
    if constexpr (std::is_enum_v<T>) f.choices = FieldType<T>::choices();
    auto section = section_;
    const std::string dotted = f.dotted();
    const std::vector<std::string> choices = f.choices;
    f.assign = [=](Job& job, const toml::node& node) -> std::optional<std::string> {
      if (auto v = FieldType<T>::read(node)) {
        if constexpr (std::is_same_v<T, double>) {
          if (!std::isfinite(*v)) return fmt::format("expected a finite number, got {}", *v);
        }
        job.*section.*member = std::move(*v);
        return std::nullopt;
      }
      if constexpr (std::is_enum_v<T>) {
        if (auto s = node.value_exact<std::string>()) {
          std::string msg = fmt::format("'{}' is not one of: {}", *s, fmt::join(choices, ", "));
          if (std::string guess = did_you_mean(*s, choices); !guess.empty())
            msg += fmt::format("; did you mean '{}'?", guess);
          return msg;
        }
      }
      return fmt::format("expected {}, got {}", article(FieldType<T>::kName), node_type_name(node));
    };
    f.literal = [=](const Job& job) { return FieldType<T>::literal(job.*section.*member); };
    return FieldHandle<Sec, T>(f, section_, member);
  }

 private:
  SectionSpec& spec_;
  Sec Job::*section_;
};

}  // namespace shardtune::job::detail
