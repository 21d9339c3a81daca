// Prompt templates of the job file ([data] prompt_template): literal text with {field}
// placeholders, "{{" and "}}" for literal braces. Parsed here once, for the job's checks and for
// the data reader, so both agree on which fields a template needs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardtune::common {

struct TemplatePiece {
  std::string text;   // literal text, or a field name
  bool field = false;
};

struct ParsedTemplate {
  std::vector<TemplatePiece> pieces;
  std::string error;  // what is wrong with the syntax; empty when it parsed

  // The placeholders' names in order of first use, each once.
  std::vector<std::string> fields() const;
};

ParsedTemplate parse_prompt_template(std::string_view templ);

}  // namespace shardtune::common
