// Slurm time-limit parsing.
#include "common/job/slurm_time.h"

#include <cctype>
#include <charconv>
#include <vector>

namespace shardtune::job {
namespace {

std::optional<int64_t> parse_number(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::vector<int64_t>> parse_colon_list(std::string_view s) {
  std::vector<int64_t> parts;
  while (true) {
    const size_t colon = s.find(':');
    auto n = parse_number(s.substr(0, colon));
    if (!n) return std::nullopt;
    parts.push_back(*n);
    if (colon == std::string_view::npos) break;
    s.remove_prefix(colon + 1);
  }
  return parts;
}

std::optional<int64_t> parse_seconds(std::string_view text) {
  const size_t dash = text.find('-');
  if (dash != std::string_view::npos) {
    auto days = parse_number(text.substr(0, dash));
    auto rest = parse_colon_list(text.substr(dash + 1));
    if (!days || !rest || rest->size() > 3) return std::nullopt;
    const std::vector<int64_t>& r = *rest;  // H, H:M or H:M:S
    int64_t seconds = *days * 86400 + r[0] * 3600;
    if (r.size() > 1) seconds += r[1] * 60;
    if (r.size() > 2) seconds += r[2];
    return seconds;
  }
  auto parts = parse_colon_list(text);
  if (!parts) return std::nullopt;
  const std::vector<int64_t>& p = *parts;
  switch (p.size()) {
    case 1: return p[0] * 60;                        // M
    case 2: return p[0] * 60 + p[1];                 // M:S
    case 3: return p[0] * 3600 + p[1] * 60 + p[2];   // H:M:S
    default: return std::nullopt;
  }
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

std::optional<SlurmTimeLimit> parse_slurm_time(std::string_view text) {
  if (text == "-1" || equals_ignoring_case(text, "UNLIMITED") || equals_ignoring_case(text, "INFINITE"))
    return SlurmTimeLimit{true, 0};
  const std::optional<int64_t> seconds = parse_seconds(text);
  if (!seconds) return std::nullopt;
  if (*seconds == 0) return SlurmTimeLimit{true, 0};
  return SlurmTimeLimit{false, (*seconds + 59) / 60 * 60};
}

}  // namespace shardtune::job
