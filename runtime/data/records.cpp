// Records of the user's data files: JSON arrays, JSON lines and CSV, each record named by its file
// and line.
#include "runtime/data/records.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "common/error.h"
#include "common/file_io.h"
#include "common/strict_json.h"
#include "runtime/data/chat.h"
#include "runtime/data/utf8.h"

namespace shardtune::data {
namespace {

using common::ErrorKind;
using nlohmann::json;

// Line numbers of byte offsets, from one pass over the text.
class LineIndex {
 public:
  explicit LineIndex(const std::string& text) {
    for (size_t i = text.find('\n'); i != std::string::npos; i = text.find('\n', i + 1)) newlines_.push_back(i);
  }
  int64_t line_of(size_t offset) const {
    return 1 + (std::lower_bound(newlines_.begin(), newlines_.end(), offset) - newlines_.begin());
  }

 private:
  std::vector<size_t> newlines_;
};

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

// The turns of the array `all` (named `list` in messages), OpenAI style (role, content) or
// ShareGPT style (from, value), or why they are not a conversation: an optional system turn, then
// user and assistant turns alternating from the user's.
std::string turns_of(const json& all, const char* list, bool messages, std::vector<Turn>& turns) {
  const char* role_key = messages ? "role" : "from";
  const char* content_key = messages ? "content" : "value";
  if (!all.is_array()) return fmt::format("\"{}\" must be an array of turns, not {}", list, all.type_name());
  for (size_t i = 0; i < all.size(); ++i) {
    const json& turn = all[i];
    const std::string which = fmt::format("{}[{}]", list, i);
    if (!turn.is_object()) return fmt::format("{} must be an object, not {}", which, turn.type_name());
    if (!turn.contains(role_key) || !turn.at(role_key).is_string())
      return fmt::format("{} has no \"{}\" string", which, role_key);
    const std::string given = turn.at(role_key).get<std::string>();
    std::string role = given;
    if (!messages && given == "human") role = "user";
    if (!messages && given == "gpt") role = "assistant";
    if (role != "system" && role != "user" && role != "assistant")
      return fmt::format("{}: unknown role {} (known: {})", which, common::json_quoted(given),
                         messages ? "system, user, assistant" : "system, human, gpt, user, assistant");
    // Meta's Llama 3.1 template renders an assistant's tool calls; shardtune's formats render role and
    // content alone, so a turn that holds calls would train on text the model's template never shows.
    if (turn.contains("tool_calls") && !turn.at("tool_calls").is_null() &&
        !(turn.at("tool_calls").is_array() && turn.at("tool_calls").empty()))
      return fmt::format("{} holds \"tool_calls\", which Meta's chat templates render and shardtune's chat formats "
                         "do not (they render role and content only): remove them, or skip such records "
                         "([data] on_bad_record = \"skip\")",
                         which);
    if (!turn.contains(content_key)) return fmt::format("{} has no \"{}\"", which, content_key);
    const json& content = turn.at(content_key);
    if (!content.is_string())
      return fmt::format("{}: \"{}\" must be a string, not {}", which, content_key, content.type_name());
    // An optional system turn first; then user and assistant alternate, from the user's.
    const size_t at = i - (!turns.empty() && turns[0].role == "system" ? 1 : 0);
    if (role == "system" && i != 0) return fmt::format("{}: a system turn may only come first", which);
    if (role != "system" && role != (at % 2 == 0 ? "user" : "assistant"))
      return fmt::format("{}: {} {} turn where {} turn belongs (after an optional system turn, user and assistant "
                         "turns alternate, from the user's)",
                         which, given == "assistant" ? "an" : "a", given,
                         at % 2 == 0 ? "a user" : "an assistant");
    // Empty as the chat templates see it: what Python's str.strip() (Jinja's trim) leaves.
    if (role != "system" && python_strip(content.get_ref<const std::string&>()).empty())
      return fmt::format("{}: the {} turn is empty (nothing but white space)", which, given);
    turns.push_back({role, content.get<std::string>()});
  }
  return "";
}

// A conversation's turns, from "messages" (role, content) or "conversations" (from, value), or why
// the record holds none (see read_conversations).
std::string conversation_of(const json& object, std::vector<Turn>& turns) {
  const bool messages = object.contains("messages"), sharegpt = object.contains("conversations");
  if (messages == sharegpt)
    return messages ? "the record holds both \"messages\" and \"conversations\": give one"
                    : "no \"messages\" (OpenAI style) or \"conversations\" (ShareGPT style) field";
  const char* list = messages ? "messages" : "conversations";
  if (std::string error = turns_of(object.at(list), list, messages, turns); !error.empty()) return error;
  if (std::none_of(turns.begin(), turns.end(), [](const Turn& t) { return t.role == "assistant"; }))
    return "a conversation without an assistant turn: nothing to learn";
  return "";
}

// An answer of a conversational pair: a string, or a list of one assistant message (TRL's form).
std::string answer_of(const json& object, const char* key, std::string& answer) {
  const json& v = object.at(key);
  if (v.is_string()) {
    answer = v.get<std::string>();
  } else if (v.is_array()) {
    std::vector<Turn> turns;
    const std::string list = fmt::format("{}", key);
    if (v.size() != 1 || !v[0].is_object())
      return fmt::format("\"{}\" must be one assistant message ([{{\"role\": \"assistant\", \"content\": ...}}]) or "
                         "a string, not a list of {}",
                         key, v.size());
    const json& m = v[0];
    if (!m.contains("role") || m.at("role") != "assistant" || !m.contains("content") || !m.at("content").is_string())
      return fmt::format("\"{}\" must be one message with role \"assistant\" and a string content", key);
    answer = m.at("content").get<std::string>();
  } else {
    return fmt::format("\"{}\" must be a string or one assistant message, not {}", key, v.type_name());
  }
  if (python_strip(answer).empty()) return fmt::format("\"{}\" is empty (nothing but white space)", key);
  return "";
}

// A preference pair: prompt, chosen and rejected as text (the fields, for the job's prompt), or as
// a conversation: the prompt's turns (ending with the user's) and the two answers in `fields`;
// without a prompt, chosen and rejected are whole conversations that differ in their last turn.
std::string preference_of(const json& object, Record& r) {
  for (const char* key : {"chosen", "rejected"})
    if (!object.contains(key)) return fmt::format("no field \"{}\"", key);
  if (!object.contains("prompt")) {
    const json& chosen = object.at("chosen");
    const json& rejected = object.at("rejected");
    if (!chosen.is_array() || !rejected.is_array())
      return "no field \"prompt\" (only conversations may leave it out: chosen and rejected then hold the whole "
             "conversation each)";
    std::vector<Turn> c, rj;
    if (std::string e = turns_of(chosen, "chosen", true, c); !e.empty()) return e;
    if (std::string e = turns_of(rejected, "rejected", true, rj); !e.empty()) return e;
    if (c.empty() || rj.empty() || c.back().role != "assistant" || rj.back().role != "assistant")
      return "chosen and rejected must each end with an assistant turn";
    if (c.size() != rj.size() || !std::equal(c.begin(), c.end() - 1, rj.begin()))
      return "chosen and rejected must be the same conversation but for their last assistant turn";
    r.fields["chosen"] = c.back().content;
    r.fields["rejected"] = rj.back().content;
    c.pop_back();
    r.turns = std::move(c);
  } else if (object.at("prompt").is_array()) {
    if (std::string e = turns_of(object.at("prompt"), "prompt", true, r.turns); !e.empty()) return e;
    if (r.turns.empty() || r.turns.back().role != "user")
      return "the prompt's conversation must end with a user turn, which the answers reply to";
    for (const char* key : {"chosen", "rejected"})
      if (std::string e = answer_of(object, key, r.fields[key]); !e.empty()) return e;
  } else if (!object.at("prompt").is_string()) {
    return fmt::format("\"prompt\" must be a string or a list of messages, not {}", object.at("prompt").type_name());
  } else {
    for (const char* key : {"chosen", "rejected"})
      if (!object.at(key).is_string())
        return fmt::format("\"prompt\" is text, so \"{}\" must be text too, not {}", key, object.at(key).type_name());
  }
  return "";
}

enum class Kind { kFields, kConversations, kPreferences };

class Collector {
 public:
  Collector(const std::vector<std::string>& required, const std::vector<std::string>& may_be_empty, bool skip_bad,
            Kind kind = Kind::kFields)
      : required_(required), may_be_empty_(may_be_empty), skip_bad_(skip_bad), kind_(kind) {}

  void bad(const std::string& where, const std::string& why) {
    const std::string message = fmt::format("{}: {}", where, why);
    ST_CHECK(skip_bad_, ErrorKind::kConfig, "bad record at {} (set [data] on_bad_record = \"skip\" to skip such records)",
             message);
    ++out.skipped;
    if (out.skip_reasons.size() < 5) out.skip_reasons.push_back(message);
  }

  void add(Record r) {
    if (kind_ == Kind::kPreferences && r.fields.count("chosen") != 0 && r.fields.count("rejected") != 0 &&
        r.fields.at("chosen") == r.fields.at("rejected"))
      return bad(r.where, "chosen and rejected are the same answer: nothing to prefer");
    for (const std::string& f : required_) {
      const auto it = r.fields.find(f);
      if (it == r.fields.end()) return bad(r.where, fmt::format("no field \"{}\"", f));
      if (it->second.empty() && std::find(may_be_empty_.begin(), may_be_empty_.end(), f) == may_be_empty_.end())
        return bad(r.where, fmt::format("field \"{}\" is empty", f));
    }
    for (const auto& [k, v] : r.fields)
      if (!is_valid_utf8(k) || !is_valid_utf8(v))
        return bad(r.where, fmt::format("field {} is not UTF-8", common::json_quoted(k)));
    out.records.push_back(std::move(r));
  }

  // A JSON object's scalar fields as text, and its conversation when conversations are read.
  void add_object(const json& object, const std::string& where) {
    if (!object.is_object()) return bad(where, fmt::format("a record must be a JSON object, not {}", object.type_name()));
    Record r{{}, where, {}};
    if (kind_ == Kind::kConversations) {
      const std::string error = conversation_of(object, r.turns);
      if (!error.empty()) return bad(where, error);
    }
    if (kind_ == Kind::kPreferences) {
      const std::string error = preference_of(object, r);
      if (!error.empty()) return bad(where, error);
    }
    for (const auto& [k, v] : object.items()) {
      if (r.fields.count(k) != 0) continue;  // a conversational pair's answers, taken out above
      if (v.is_string()) r.fields[k] = v.get<std::string>();
      else if (v.is_number() || v.is_boolean()) r.fields[k] = v.dump();
      else if (v.is_null()) r.fields[k] = "";
    }
    if (kind_ == Kind::kPreferences) {
      if (!r.turns.empty()) {  // its fields were checked above; the template does not apply
        if (r.fields.at("chosen") == r.fields.at("rejected"))
          return bad(where, "chosen and rejected are the same answer: nothing to prefer");
        for (const auto& [k, v] : r.fields)
          if (!is_valid_utf8(k) || !is_valid_utf8(v))
            return bad(where, fmt::format("field {} is not UTF-8", common::json_quoted(k)));
        out.records.push_back(std::move(r));
        return;
      }
    }
    add(std::move(r));
  }

  RecordFile out;

 private:
  const std::vector<std::string>& required_;
  const std::vector<std::string>& may_be_empty_;
  bool skip_bad_;
  Kind kind_;
};

// Byte ranges [start, end) of each top-level element of a JSON array (to name its line): from its
// first byte to the end of its value (a closing brace, bracket or quote, or a bare scalar's last
// character), so that what stands between a value and the next comma is not part of it.
std::vector<std::pair<size_t, size_t>> array_elements(const std::string& text) {
  std::vector<std::pair<size_t, size_t>> out;
  std::vector<size_t> starts;
  size_t value_end = 0;
  int depth = 0;
  bool in_string = false, escaped = false, expect = false;
  auto close_element = [&] {
    if (!starts.empty() && out.size() < starts.size()) out.emplace_back(starts.back(), std::max(value_end, starts.back()));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      if (!in_string && depth == 1) value_end = i + 1;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (depth == 1 && expect) {
      starts.push_back(i);
      expect = false;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth == 1 && c == '[') expect = true;
    } else if (c == ']' || c == '}') {
      if (--depth == 1) value_end = i + 1;
      if (depth == 0) close_element();
    } else if (c == ',' && depth == 1) {
      close_element();
      expect = true;
    } else if (depth == 1 && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-')) {
      value_end = i + 1;  // a bare scalar: number, true, false, null
    }
  }
  return out;
}

// A JSON array's elements, with those that hold bytes of invalid UTF-8 (which nlohmann refuses,
// failing the whole file) overwritten in `text` by a 0 and spaces, newlines kept, so that the
// rest parses, every line stays where it was, and each such element is a bad record of its own.
struct NotUtf8Elements {
  std::vector<std::pair<size_t, size_t>> elements;            // byte ranges of the array's elements
  std::map<size_t, std::pair<unsigned char, size_t>> bad;     // element -> (first bad byte, its offset)
};

NotUtf8Elements blank_not_utf8_elements(std::string& text) {
  NotUtf8Elements out{array_elements(text), {}};
  if (is_valid_utf8(text)) return out;
  for (size_t i = 0; i < out.elements.size(); ++i) {
    const auto [begin, end] = out.elements[i];
    const size_t at = first_invalid_utf8(std::string_view(text).substr(begin, end - begin));
    if (at == std::string_view::npos) continue;
    out.bad[i] = {static_cast<unsigned char>(text[begin + at]), begin + at};
    for (size_t k = begin; k < end; ++k)
      if (text[k] != '\n') text[k] = k == begin ? '0' : ' ';
  }
  return out;
}

// The key a JSON object repeats (nlohmann would keep the last silently), for a bad record.
std::optional<std::string> repeated_key(const char* begin, const char* end) {
  try {
    const common::StrictJson parsed = common::parse_json_strict(begin, end);
    if (parsed.duplicate) return parsed.duplicate->second;
  } catch (const json::exception&) {
  }
  return std::nullopt;
}

}  // namespace

RecordFormat record_format_of(const std::string& path) {
  auto ends_with = [&](const char* s) {
    const std::string suffix = s;
    return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".json")) return RecordFormat::kJson;
  if (ends_with(".jsonl") || ends_with(".ndjson")) return RecordFormat::kJsonLines;
  if (ends_with(".csv")) return RecordFormat::kCsv;
  common::raise(ErrorKind::kConfig,
                fmt::format("{}: unknown data file type: name it .json (an array of records), .jsonl or .csv", path));
}

std::vector<std::pair<int64_t, std::vector<std::string>>> parse_csv(const std::string& text, const std::string& name) {
  std::vector<std::pair<int64_t, std::vector<std::string>>> rows;
  std::vector<std::string> row;
  std::string field;
  int64_t line = 1, row_line = 1;
  bool quoted = false, field_started = false;
  size_t quote_line = 0;
  auto end_field = [&] {
    row.push_back(std::move(field));
    field.clear();
    field_started = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && !field_started) {
      quoted = field_started = true;
      quote_line = static_cast<size_t>(line);
    } else if (c == ',') {
      end_field();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_field();
      if (!(row.size() == 1 && row[0].empty())) rows.emplace_back(row_line, std::move(row));
      row.clear();
      row_line = ++line;
    } else {
      field += c;
      field_started = true;
    }
  }
  ST_CHECK(!quoted, ErrorKind::kConfig, "{}:{}: a quoted CSV field is never closed", name, quote_line);
  if (field_started || !row.empty()) {
    end_field();
    rows.emplace_back(row_line, std::move(row));
  }
  return rows;
}

namespace {

// A JSON array of records, each named by its line; a record with bytes that are not UTF-8 or a
// repeated key is bad, the others collected.
void read_json_array(const std::string& path, std::string& text, const LineIndex& lines, Collector& c) {
  const NotUtf8Elements not_utf8 = blank_not_utf8_elements(text);
  json all;
  bool duplicate = false;
  try {
    common::StrictJson parsed = common::parse_json_strict(text.data(), text.data() + text.size());
    ST_CHECK(!parsed.too_deep, ErrorKind::kConfig, "{}: nested more than {} deep: not a file of records", path,
             common::kMaxJsonDepth);
    duplicate = parsed.duplicate.has_value();
    all = std::move(parsed.value);
  } catch (const json::parse_error& e) {
    common::raise(ErrorKind::kConfig,
                  fmt::format("{}:{}: not valid JSON: {}", path, lines.line_of(e.byte), escaped(e.what())));
  } catch (const json::exception& e) {  // a number out of range, like 1e400
    common::raise(ErrorKind::kConfig, fmt::format("{}: not valid JSON: {}", path, escaped(e.what())));
  }
  ST_CHECK(all.is_array(), ErrorKind::kConfig, "{}: expected a JSON array of records, found {}", path, all.type_name());
  const std::vector<std::pair<size_t, size_t>>& elements = not_utf8.elements;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string where = fmt::format("{}:{}", path, i < elements.size() ? lines.line_of(elements[i].first) : 0);
    if (auto bad = not_utf8.bad.find(i); bad != not_utf8.bad.end()) {
      c.bad(where, fmt::format("the record is not UTF-8 (byte \\x{:02X} on line {})", bad->second.first,
                               lines.line_of(bad->second.second)));
      continue;
    }
    // Only when the file repeats a key somewhere: which records do.
    const std::optional<std::string> key =
        duplicate && i < elements.size()
            ? repeated_key(text.data() + elements[i].first, text.data() + elements[i].second)
            : std::nullopt;
    if (key) c.bad(where, fmt::format("the key {} appears twice in the record", common::json_quoted(*key)));
    else c.add_object(all[i], where);
  }
}

// One record a line; blank lines skipped, each bad line named by its number.
void read_json_lines(const std::string& path, const std::string& text, Collector& c) {
  int64_t line = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string_view content(text.data() + start, end - start);
    const std::string where = fmt::format("{}:{}", path, line);
    if (content.find_first_not_of(" \t\r") != std::string_view::npos) {
      if (!is_valid_utf8(content)) {
        c.bad(where, "the line is not UTF-8");
      } else {
        try {
          common::StrictJson parsed = common::parse_json_strict(content.data(), content.data() + content.size());
          if (parsed.too_deep)
            c.bad(where, fmt::format("nested more than {} deep", common::kMaxJsonDepth));
          else if (parsed.duplicate)
            c.bad(where, fmt::format("the key {} appears twice in the record",
                                     common::json_quoted(parsed.duplicate->second)));
          else
            c.add_object(parsed.value, where);
        } catch (const json::exception& e) {  // syntax, or a number out of range (1e400)
          c.bad(where, fmt::format("not valid JSON ({})", escaped(e.what())));
        }
      }
    }
    start = end + 1;
  }
}

// A header row naming the fields, then one record a row.
void read_csv(const std::string& path, const std::string& text, Collector& c) {
  const auto rows = parse_csv(text, path);
  ST_CHECK(!rows.empty(), ErrorKind::kConfig, "{}: empty CSV file: expected a header row", path);
  const std::vector<std::string>& header = rows[0].second;
  for (size_t k = 0; k < header.size(); ++k)
    ST_CHECK(std::find(header.begin(), header.begin() + static_cast<std::ptrdiff_t>(k), header[k]) ==
                 header.begin() + static_cast<std::ptrdiff_t>(k),
             ErrorKind::kConfig, "{}:{}: the header names the column {} twice: rename one", path, rows[0].first,
             common::json_quoted(header[k]));
  for (size_t r = 1; r < rows.size(); ++r) {
    const auto& [line, cells] = rows[r];
    const std::string where = fmt::format("{}:{}", path, line);
    if (cells.size() != header.size()) {
      c.bad(where, fmt::format("{} field(s), the header has {}", cells.size(), header.size()));
      continue;
    }
    Record rec{{}, where, {}};
    for (size_t k = 0; k < header.size(); ++k) rec.fields[header[k]] = cells[k];
    c.add(std::move(rec));
  }
}

RecordFile read_all(const std::string& path, Collector& c) {
  std::string text = common::read_file(path, ErrorKind::kConfig, "the data file");
  if (text.compare(0, kUtf8Bom.size(), kUtf8Bom) == 0) text.erase(0, kUtf8Bom.size());  // no line moves
  switch (record_format_of(path)) {
    case RecordFormat::kJson: read_json_array(path, text, LineIndex(text), c); break;
    case RecordFormat::kJsonLines: read_json_lines(path, text, c); break;
    case RecordFormat::kCsv: read_csv(path, text, c); break;
  }
  return std::move(c.out);
}

}  // namespace

RecordFile read_records(const std::string& path, const std::vector<std::string>& required,
                        const std::vector<std::string>& may_be_empty, bool skip_bad) {
  Collector c(required, may_be_empty, skip_bad);
  return read_all(path, c);
}

RecordFile read_conversations(const std::string& path, bool skip_bad) {
  ST_CHECK(record_format_of(path) != RecordFormat::kCsv, ErrorKind::kConfig,
           "{}: chat data is JSON (an array of records) or JSON Lines, not CSV: a conversation is a list of turns",
           path);
  const std::vector<std::string> none;
  Collector c(none, none, skip_bad, Kind::kConversations);
  return read_all(path, c);
}

RecordFile read_preferences(const std::string& path, const std::vector<std::string>& required,
                            const std::vector<std::string>& may_be_empty, bool skip_bad) {
  Collector c(required, may_be_empty, skip_bad, Kind::kPreferences);
  return read_all(path, c);
}

}  // namespace shardtune::data
