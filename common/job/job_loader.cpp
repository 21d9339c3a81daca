// TOML → Job: syntax, unknown keys, types, ranges and overrides, all reported together.
#include "common/job/job_loader.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/job/data_sources.h"
#include "common/job/job_checks.h"
#include "common/job/schema.h"
#include "common/job/toml_position.h"

namespace shardtune::job {
namespace {

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const SectionSpec& s : job_schema()) names.push_back(s.name);
  return names;
}

std::vector<std::string> field_names(const SectionSpec& section) {
  std::vector<std::string> names;
  for (const FieldSpec& f : section.fields) names.push_back(f.key);
  return names;
}

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  std::string guess = did_you_mean(word, candidates);
  return guess.empty() ? "" : fmt::format("; did you mean '{}'?", guess);
}

// The error for a key of no field: another tool's spelling names shardtune's, others get a guess.
std::string unknown_key_message(const SectionSpec& section, const std::string& key) {
  if (auto hint = foreign_key_hint(section.name, key)) return fmt::format("unknown key in [{}]: {}", section.name, *hint);
  return fmt::format("unknown key in [{}]{}", section.name, suggestion(key, field_names(section)));
}

// Parses `value` as the TOML value of `field`; a string field also takes a bare word.
std::optional<toml::table> parse_override_value(const FieldSpec& field, const std::string& value,
                                                const std::string& source) {
  try {
    toml::table t = toml::parse("value = " + value, std::string_view(source));
    if (!field.bare_word_ok || t["value"].is_string()) return t;
  } catch (const toml::parse_error&) {
    if (!field.bare_word_ok) return std::nullopt;
  }
  // A bare word for a string field: quote it as TOML so the value keeps its source.
  std::string quoted = "\"";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') quoted += '\\';
    if (c < 0x20 || c == 0x7f) quoted += fmt::format("\\u{:04X}", c);
    else quoted += static_cast<char>(c);
  }
  quoted += '"';
  return toml::parse("value = " + quoted, std::string_view(source));
}

void apply_override(toml::table& root, const std::string& arg, Diagnostics& diags) {
  const std::string source = std::string(kOverridePrefix) + arg;
  const SourcePos pos{source, 0, 0};
  const size_t eq = arg.find('=');
  const size_t dot = arg.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    diags.error(pos, "", "expected section.key=value, e.g. --set train.lr=2e-5");
    return;
  }
  const std::string section = arg.substr(0, dot);
  const std::string key = arg.substr(dot + 1, eq - dot - 1);
  const std::string value = arg.substr(eq + 1);
  const SectionSpec* spec = find_section(section);
  if (spec == nullptr) {
    diags.error(pos, section, fmt::format("unknown section [{}]{}", section, suggestion(section, section_names())));
    return;
  }
  const FieldSpec* field = find_field(section, key);
  if (field == nullptr) {
    diags.error(pos, section + "." + key, unknown_key_message(*spec, key));
    return;
  }
  auto parsed = parse_override_value(*field, value, source);
  if (!parsed) {
    diags.error(pos, field->dotted(), fmt::format("'{}' is not a valid {} value", value, field->type_name));
    return;
  }
  toml::node* existing = root.get(section);
  if (existing == nullptr) existing = &root.insert_or_assign(section, toml::table{}).first->second;
  if (toml::table* table = existing->as_table()) {
    table->insert_or_assign(key, std::move(*parsed->get("value")));
  } else {
    diags.error(pos, section, "cannot override a key of [" + section + "]: it is not a table in the job file");
  }
}

void read_sections(const toml::table& root, const std::string& file, LoadedJob& out) {
  for (auto&& [name, node] : root) {
    const std::string section(name.str());
    const SectionSpec* spec = find_section(section);
    if (spec == nullptr) {
      out.diagnostics.error(position_of(name.source(), file), section,
                            fmt::format("unknown section [{}]{}", section, suggestion(section, section_names())));
      continue;
    }
    const toml::table* table = node.as_table();
    if (table == nullptr) {
      out.diagnostics.error(position_of(node.source(), file), section,
                            fmt::format("[{}] must be a table (a section), not a single value", section));
      continue;
    }
    for (auto&& [key_node, value] : *table) {
      const std::string key(key_node.str());
      if (section == "data" && key == "sources") continue;  // read once [data] is (read_data_sources)
      const FieldSpec* field = find_field(section, key);
      if (field == nullptr) {
        out.diagnostics.error(position_of(key_node.source(), file), section + "." + key,
                              unknown_key_message(*spec, key));
        continue;
      }
      const SourcePos pos = position_of(value.source(), file);
      if (auto problem = field->assign(out.job, value)) {
        out.diagnostics.error(pos, field->dotted(), *problem);
        continue;
      }
      out.sources[field->dotted()] = pos;
    }
  }
}

}  // namespace

LoadedJob parse_job(std::string_view text, const std::string& file, const std::vector<std::string>& overrides) {
  LoadedJob out;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    out.diagnostics.error(SourcePos{file, 1, 1}, "",
                          "the job file is empty; start from configs/tiny-cpu.toml "
                          "(at least [job] name and [model] path or preset)");
    return out;
  }
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(file));
  } catch (const toml::parse_error& e) {
    out.diagnostics.error(position_of(e.source(), file), "",
                          fmt::format("TOML syntax error: {}", e.description()));
    return out;
  }
  for (const std::string& o : overrides) apply_override(root, o, out.diagnostics);
  read_sections(root, file, out);
  if (const toml::table* data = root["data"].as_table())
    if (const toml::node* sources = data->get("sources"))
      read_data_sources(*sources, file, out.job, out.sources, out.diagnostics);
  resolve_defaults(out.job);
  for (const SectionSpec& section : job_schema()) {
    for (const FieldSpec& field : section.fields) {
      if (!field.check) continue;
      if (auto problem = field.check(out.job)) {
        auto it = out.sources.find(field.dotted());
        out.diagnostics.error(it != out.sources.end() ? it->second : SourcePos{file, 0, 0}, field.dotted(),
                              *problem);
      }
    }
  }
  check_job(out.job, out.sources, file, out.diagnostics);
  check_data_sources(out.job, out.sources, file, out.diagnostics);
  out.diagnostics.sort_by_position();
  return out;
}

LoadedJob load_job_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadedJob out;
    out.diagnostics.error(SourcePos{path, 0, 0}, "", "cannot open the job file: " + std::string(std::strerror(errno)));
    return out;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_job(text.str(), path, overrides);
}

Job load_job_or_throw(const std::string& path, const std::vector<std::string>& overrides, Diagnostics* warnings) {
  LoadedJob loaded = load_job_file(path, overrides);
  if (loaded.diagnostics.has_errors()) throw JobError(loaded.diagnostics);
  if (warnings != nullptr) *warnings = loaded.diagnostics;
  return loaded.job;
}

}  // namespace shardtune::job
