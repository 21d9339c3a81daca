// The job file's schema: for every section and key, its type, default, constraint and
// documentation, with the code that reads it from TOML and writes it back.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "common/job/job.h"

namespace shardtune::job {

struct FieldSpec {
  std::string section;
  std::string key;
  std::string doc;
  std::string type_name;             // "integer", "float", "boolean", "string", "list of strings"
  std::vector<std::string> choices;  // the accepted strings of an enum field
  std::string constraint;            // e.g. ">= 1", for the reference page
  bool bare_word_ok = false;         // `--set` may give the value without TOML quotes
  // Sets the field from a TOML value; returns what was wrong with it, if anything.
  std::function<std::optional<std::string>(Job&, const toml::node&)> assign;
  // Checks the field's value against its constraint; returns the problem, if any.
  std::function<std::optional<std::string>(const Job&)> check;
  // The field's current value as a TOML literal.
  std::function<std::string(const Job&)> literal;

  std::string dotted() const { return section + "." + key; }
};

struct SectionSpec {
  std::string name;
  std::string doc;
  std::vector<FieldSpec> fields;
};

// Every section in file order.
const std::vector<SectionSpec>& job_schema();
const SectionSpec* find_section(std::string_view name);
const FieldSpec* find_field(std::string_view section, std::string_view key);

// For a key that is not in the schema but is another tool's spelling of one (llama-recipes'
// use_peft, peft_method, ...): what to write instead. nullopt for keys nobody spells that way.
std::optional<std::string> foreign_key_hint(std::string_view section, std::string_view key);

// The name of an enum value as written in job files ("FULL_SHARD", "packing", ...).
template <class E>
std::string_view enum_name(E value);

// The enum value a job file writes as `name`; nullopt for a name the key does not take.
template <class E>
std::optional<E> enum_value(std::string_view name);

}  // namespace shardtune::job
