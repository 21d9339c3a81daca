// Prompt-template syntax.
#include "common/prompt_template.h"

#include <fmt/format.h>

#include <algorithm>

namespace shardtune::common {

std::vector<std::string> ParsedTemplate::fields() const {
  std::vector<std::string> out;
  for (const TemplatePiece& p : pieces)
    if (p.field && std::find(out.begin(), out.end(), p.text) == out.end()) out.push_back(p.text);
  return out;
}

ParsedTemplate parse_prompt_template(std::string_view templ) {
  ParsedTemplate out;
  std::string literal;
  auto flush = [&] {
    if (!literal.empty()) out.pieces.push_back({std::move(literal), false});
    literal.clear();
  };
  for (size_t i = 0; i < templ.size(); ++i) {
    const char c = templ[i];
    if ((c == '{' || c == '}') && i + 1 < templ.size() && templ[i + 1] == c) {
      literal += c;
      ++i;
    } else if (c == '{') {
      const size_t close = templ.find_first_of("{}", i + 1);
      if (close == std::string_view::npos || templ[close] != '}') {
        out.error = fmt::format("the '{{' at character {} is never closed (write '{{{{' for a literal brace)", i + 1);
        return out;
      }
      if (close == i + 1) {
        out.error = fmt::format("an empty placeholder '{{}}' at character {}: name a field, e.g. {{question}}", i + 1);
        return out;
      }
      flush();
      out.pieces.push_back({std::string(templ.substr(i + 1, close - i - 1)), true});
      i = close;
    } else if (c == '}') {
      out.error = fmt::format("a lone '}}' at character {} (write '}}}}' for a literal brace)", i + 1);
      return out;
    } else {
      literal += c;
    }
  }
  flush();
  return out;
}

}  // namespace shardtune::common
