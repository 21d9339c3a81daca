#include "common/shell_words.h"

#include "common/error.h"

namespace shardtune::common {

bool is_sbatch_word(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;  // controls, space, DEL, non-ASCII
    switch (c) {
      case '"': case '\'': case '\\': case '#': case '$': case '`': return false;
      default: break;
    }
  }
  return true;
}

bool is_sbatch_path(std::string_view s) { return is_sbatch_word(s) && s.find('%') == std::string_view::npos; }

bool is_one_line(std::string_view s) {
  for (const unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

std::string shell_quote(std::string_view s) {
  ST_CHECK(s.find('\0') == std::string_view::npos, ErrorKind::kInternal, "a shell word cannot hold a NUL byte");
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

}  // namespace shardtune::common
