// Diagnostics and "did you mean" suggestions.
#include "common/job/diagnostics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace shardtune::job {
namespace {

// Optimal-string-alignment distance: Levenshtein plus adjacent transpositions ("lr_scehduler").
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

}  // namespace

std::string format(const Diagnostic& d) {
  std::string where = d.pos.file.empty() ? "<job>" : d.pos.file;
  if (d.pos.line > 0) where += fmt::format(":{}:{}", d.pos.line, d.pos.column);
  const char* severity = d.severity == Severity::kError ? "error" : "warning";
  if (d.key.empty()) return fmt::format("{}: {}: {}", where, severity, d.message);
  return fmt::format("{}: {}: {}: {}", where, severity, d.key, d.message);
}

void Diagnostics::error(SourcePos pos, std::string key, std::string message) {
  items_.push_back({Severity::kError, std::move(pos), std::move(key), std::move(message)});
}

void Diagnostics::warning(SourcePos pos, std::string key, std::string message) {
  items_.push_back({Severity::kWarning, std::move(pos), std::move(key), std::move(message)});
}

bool Diagnostics::has_errors() const {
  return std::any_of(items_.begin(), items_.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::kError; });
}

void Diagnostics::sort_by_position() {
  std::stable_sort(items_.begin(), items_.end(), [](const Diagnostic& a, const Diagnostic& b) {
    const bool a_has = a.pos.line > 0, b_has = b.pos.line > 0;
    if (a_has != b_has) return a_has;
    if (a.pos.line != b.pos.line) return a.pos.line < b.pos.line;
    return a.pos.column < b.pos.column;
  });
}

std::string Diagnostics::to_string() const {
  std::string out;
  for (const Diagnostic& d : items_) {
    out += format(d);
    out += '\n';
  }
  return out;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t dist = edit_distance(word, c);
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  return best;
}

}  // namespace shardtune::job
