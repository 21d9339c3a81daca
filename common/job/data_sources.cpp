// Reading, checking and writing [[data.sources]].
#include "common/job/data_sources.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>

#include "common/job/field_builder.h"
#include "common/job/no_effect.h"
#include "common/job/schema.h"
#include "common/job/toml_position.h"
#include "common/prompt_template.h"

namespace shardtune::job {
namespace {

std::string key_of(size_t index, std::string_view key) { return fmt::format("data.sources[{}].{}", index + 1, key); }

// A job whose [data] is the source's: the [data] rules then apply to the source as they are.
Job as_job(const Job& job, const DataSection& data) {
  Job out = job;
  out.data = data;
  out.data_sources.clear();
  return out;
}

// Names go into metrics.jsonl keys, TensorBoard tags and chart titles as they are.
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

// The training file's name without its extension, other characters as '_'.
std::string default_name(const std::string& train_file) {
  std::string stem = std::filesystem::path(train_file).stem().string();
  for (char& c : stem)
    if (!name_char(c)) c = '_';
  return stem.empty() ? "source" : stem;
}

// Reads one entry into `source`; a key of no source is an error naming it.
void read_entry(const toml::table& entry, size_t index, const std::string& file, Job& job, DataSource& source,
                FieldSources& sources, Diagnostics& diags) {
  Job scratch = as_job(job, job.data);
  bool named = false;
  for (auto&& [key_node, value] : entry) {
    const std::string key(key_node.str());
    const SourcePos pos = position_of(value.source(), file);
    const std::string dotted = key_of(index, key);
    if (key == "name") {
      auto name = value.value_exact<std::string>();
      if (!name || name->empty() || !std::all_of(name->begin(), name->end(), name_char))
        diags.error(pos, dotted, "expected a non-empty name of letters, digits, '_', '-' and '.'");
      else
        source.name = *name, named = true;
    } else if (key == "weight") {
      auto weight = detail::FieldType<double>::read(value);
      if (!weight || !std::isfinite(*weight) || *weight <= 0)
        diags.error(pos, dotted, "expected a positive, finite number: a source's share of the samples is its weight "
                                 "over the sum of the weights");
      else
        source.weight = *weight;
    } else if (std::find(source_keys().begin(), source_keys().end(), key) != source_keys().end()) {
      const FieldSpec* field = find_field("data", key);
      if (auto problem = field->assign(scratch, value)) {
        diags.error(pos, dotted, *problem);
        continue;
      }
    } else {
      const std::string hint =
          find_field("data", key) != nullptr
              ? fmt::format("[data] {} is the job's, for every source: set it in [data]", key)
              : fmt::format("a source takes name, weight and {}{}", fmt::join(source_keys(), ", "), [&] {
                  std::vector<std::string> candidates = source_keys();
                  candidates.insert(candidates.end(), {"name", "weight"});
                  const std::string guess = did_you_mean(key, candidates);
                  return guess.empty() ? std::string() : fmt::format("; did you mean '{}'?", guess);
                }());
      diags.error(pos, dotted, fmt::format("unknown key in [[data.sources]]: {}", hint));
      continue;
    }
    sources[dotted] = pos;
  }
  source.data = scratch.data;
  if (!named) source.name = default_name(source.data.train_file);
}

void check_entry(const Job& job, const DataSource& source, size_t index, const FieldSources& sources,
                 const std::string& file, Diagnostics& diags) {
  auto where = [&](std::string_view key) {
    if (auto it = sources.find(key_of(index, key)); it != sources.end()) return it->second;
    if (auto it = sources.find(key_of(index, "name")); it != sources.end()) return it->second;
    return SourcePos{file, 0, 0};
  };
  auto error = [&](std::string_view key, const std::string& message) {
    diags.error(where(key), key_of(index, key), fmt::format("source \"{}\": {}", source.name, message));
  };
  const Job as = as_job(job, source.data);
  for (const std::string& key : source_keys()) {
    const FieldSpec* field = find_field("data", key);
    if (field->check)
      if (auto problem = field->check(as)) error(key, *problem);
  }
  if (source.data.format == DataFormat::kSynthetic)
    error("format", "needs the format of its file (alpaca, samsum, grammar, jsonl, chat, preference): synthetic "
                    "data reads no file and does not mix");
  else if (source.data.train_file.empty())
    error("train_file", fmt::format("format \"{}\" needs train_file", enum_name(source.data.format)));
  if (!source.data.prompt_template.empty()) {
    const common::ParsedTemplate parsed = common::parse_prompt_template(source.data.prompt_template);
    if (!parsed.error.empty()) error("prompt_template", parsed.error);
  }
  // A key of one format on a source of another: refused, as nothing would read it. (A resolved job
  // file spells out every key with its default; those are not refused.)
  const Job defaults;
  for (const NoEffectRule& rule : no_effect_rules()) {
    if (rule.key.rfind("data.", 0) != 0) continue;
    const std::string key = rule.key.substr(5);
    const FieldSpec* field = find_field("data", key);
    if (sources.count(key_of(index, key)) == 0 || field->literal(as) == field->literal(defaults)) continue;
    if (auto because = rule.because(as))
      error(key, fmt::format("{} = {} has no effect: {}", key, field->literal(as), *because));
  }
}

}  // namespace

const std::vector<std::string>& source_keys() {
  static const std::vector<std::string> keys{"format",         "train_file",     "val_file",
                                             "val_fraction",   "prompt_field",   "response_field",
                                             "prompt_template", "on_bad_record", "chat_format",
                                             "train_on"};
  return keys;
}

void read_data_sources(const toml::node& node, const std::string& file, Job& job, FieldSources& sources,
                       Diagnostics& diags) {
  const toml::array* entries = node.as_array();
  if (entries == nullptr || !entries->is_array_of_tables()) {
    diags.error(position_of(node.source(), file), "data.sources",
                "[data] sources must be tables: one [[data.sources]] per source (file, format, weight)");
    return;
  }
  sources["data.sources"] = position_of(node.source(), file);
  for (size_t i = 0; i < entries->size(); ++i) {
    DataSource source;
    read_entry(*entries->get(i)->as_table(), i, file, job, source, sources, diags);
    job.data_sources.push_back(std::move(source));
  }
  // The rest of the job reads [data] format for the kind of data (records, pairs): the sources'.
  if (!job.data_sources.empty() && sources.count("data.format") == 0) job.data.format = job.data_sources[0].data.format;
}

void check_data_sources(const Job& job, const FieldSources& sources, const std::string& file, Diagnostics& diags) {
  if (job.data_sources.empty()) return;
  auto at = [&](const std::string& key) {
    if (auto it = sources.find(key); it != sources.end()) return it->second;
    return SourcePos{file, 0, 0};
  };
  for (const auto& [key, value] : {std::pair{"train_file", &job.data.train_file}, std::pair{"val_file", &job.data.val_file}}) {
    const std::string dotted = fmt::format("data.{}", key);
    if (sources.count(dotted) != 0 && !value->empty())
      diags.error(at(dotted), dotted,
                  fmt::format("[data] {} and [[data.sources]] exclude each other: give each source its own {}", key,
                              key));
  }
  if (sources.count("data.format") != 0 && job.data.format == DataFormat::kSynthetic)
    diags.error(at("data.format"), "data.format",
                "format = \"synthetic\" reads no file, and [[data.sources]] are files: set [data] format to the "
                "sources' format, or leave it out");
  std::set<std::string> names;
  const bool pairs = job.data.format == DataFormat::kPreference;
  for (size_t i = 0; i < job.data_sources.size(); ++i) {
    const DataSource& s = job.data_sources[i];
    check_entry(job, s, i, sources, file, diags);
    if (!names.insert(s.name).second)
      diags.error(at(key_of(i, "name")), key_of(i, "name"),
                  fmt::format("two sources are named \"{}\": give each a name of its own", s.name));
    if ((s.data.format == DataFormat::kPreference) != pairs)
      diags.error(at(key_of(i, "format")), key_of(i, "format"),
                  fmt::format("source \"{}\" is format \"{}\" but [data] format is \"{}\": preference pairs do not mix "
                              "with other records",
                              s.name, enum_name(s.data.format), enum_name(job.data.format)));
  }
}

std::optional<std::string> no_effect_on_sources(const Job& job, const FieldSources& sources,
                                                const NoEffectRule& rule) {
  const std::string key = rule.key.substr(rule.key.find('.') + 1);
  const bool per_source = std::find(source_keys().begin(), source_keys().end(), key) != source_keys().end();
  std::optional<std::string> first;
  for (size_t i = 0; i < job.data_sources.size(); ++i) {
    const DataSource& s = job.data_sources[i];
    if (per_source && sources.count(key_of(i, key)) != 0) continue;  // the source's own value
    const std::optional<std::string> because = rule.because(as_job(job, s.data));
    if (!because) return std::nullopt;
    if (!first) first = fmt::format("no source it reaches reads it (source \"{}\": {})", s.name, *because);
  }
  return first;  // (where every source sets its own, as a resolved job's do: nothing said)
}

std::string data_sources_toml(const Job& job) {
  std::string out;
  for (const DataSource& s : job.data_sources) {
    const Job as = as_job(job, s.data);
    out += fmt::format("\n[[data.sources]]\nname = {}\nweight = {}\n", detail::FieldType<std::string>::literal(s.name),
                       detail::FieldType<double>::literal(s.weight));
    for (const std::string& key : source_keys()) out += fmt::format("{} = {}\n", key, find_field("data", key)->literal(as));
  }
  return out;
}

std::string data_sources_markdown() {
  return fmt::format(
      "\n### [[data.sources]]\n\n"
      "Several data files mixed by weight, one table each (docs/data-mixing.md). Instead of [data] train_file and "
      "val_file.\n\n"
      "| key | type | default | meaning |\n|---|---|---|---|\n"
      "| `name` | string | the training file's name without its extension (other characters as `_`) | How logs, "
      "metrics and charts name the source: letters, digits, `_`, `-` and `.`; unique. |\n"
      "| `weight` | float | `1.0` | The source's share of the samples is its weight over the sum of the weights; > 0. |\n"
      "\nA source may also set these [data] keys, which default to [data]'s: {}. A key that the source's format does "
      "not read is refused.\n",
      fmt::format("`{}`", fmt::join(source_keys(), "`, `")));
}

}  // namespace shardtune::job
