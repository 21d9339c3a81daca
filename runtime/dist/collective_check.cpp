// Patterns whose bf16 reductions are exact in any order (see the header for why).
#include "runtime/dist/collective_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace shardtune::dist {
namespace {

constexpr int kMaxContributors = 128;  // × the largest contribution (2) = 256 = 2^8, exact in bf16

// Ranks per residue class: element j is contributed by the ranks r ≡ j (mod m).
int modulus(int size) { return std::max(1, (size + kMaxContributors - 1) / kMaxContributors); }
int64_t sum_length(int size) { return std::max<int64_t>(8, 2 * modulus(size)); }
float sum_value(int64_t j, int m) { return (j / m) % 2 == 0 ? 1.0f : 2.0f; }

// Averaged pattern: element j < size is contributed by rank j, element size + j by rank
// size-1-j (the other way round), so that two ranks' contributions swapped still show.
int64_t avg_length(int size) { return 2 * static_cast<int64_t>(size); }
int avg_owner(int64_t j, int size) { return j < size ? static_cast<int>(j) : size - 1 - static_cast<int>(j - size); }
float avg_value(int64_t j, int size) { return j < size ? 1.0f : 2.0f; }

// The bf16 spacing just above |x|'s binade start: 2^(e-7) for x in [2^e, 2^(e+1)).
double bf16_ulp(double x) {
  int e = 0;
  std::frexp(std::abs(x), &e);  // |x| = f·2^e, f in [0.5, 1)
  return std::ldexp(1.0, e - 8);
}

std::string mismatches(const std::vector<float>& got, int64_t length, auto&& wrong, auto&& expected) {
  if (static_cast<int64_t>(got.size()) != length) return fmt::format("{} elements came back, {} were sent", got.size(), length);
  std::string out;
  int shown = 0, bad = 0;
  for (int64_t j = 0; j < length; ++j) {
    if (!wrong(j)) continue;
    if (++bad <= 3) out += fmt::format("{}element {} = {} (expected {})", shown++ ? ", " : "", j, got[j], expected(j));
  }
  if (bad > 3) out += fmt::format(" and {} more", bad - 3);
  return out;
}

}  // namespace

std::vector<float> bf16_sum_pattern(int size, int rank) {
  const int m = modulus(size);
  std::vector<float> v(sum_length(size), 0.0f);
  for (int64_t j = 0; j < static_cast<int64_t>(v.size()); ++j)
    if (j % m == rank % m) v[j] = sum_value(j, m);
  return v;
}

std::vector<float> bf16_sum_expected(int size) {
  const int m = modulus(size);
  std::vector<float> v(sum_length(size));
  for (int64_t j = 0; j < static_cast<int64_t>(v.size()); ++j) {
    const int64_t residue = j % m;
    const int64_t contributors = (size - residue + m - 1) / m;  // ranks r < size with r ≡ residue
    v[j] = static_cast<float>(contributors) * sum_value(j, m);
  }
  return v;
}

std::vector<float> bf16_avg_pattern(int size, int rank) {
  std::vector<float> v(avg_length(size), 0.0f);
  for (int64_t j = 0; j < avg_length(size); ++j)
    if (avg_owner(j, size) == rank) v[j] = avg_value(j, size);
  return v;
}

std::vector<double> bf16_avg_expected(int size) {
  std::vector<double> v(avg_length(size));
  for (int64_t j = 0; j < avg_length(size); ++j) v[j] = static_cast<double>(avg_value(j, size)) / size;
  return v;
}

std::string check_bf16_sum(const std::vector<float>& got, int size) {
  const std::vector<float> want = bf16_sum_expected(size);
  return mismatches(got, static_cast<int64_t>(want.size()), [&](int64_t j) { return !(got[j] == want[j]); },
                    [&](int64_t j) { return want[j]; });
}

std::string check_bf16_avg(const std::vector<float>& got, int size) {
  const std::vector<double> want = bf16_avg_expected(size);
  return mismatches(
      got, static_cast<int64_t>(want.size()),
      [&](int64_t j) { return !(std::abs(got[j] - want[j]) <= bf16_ulp(want[j])); },
      [&](int64_t j) { return want[j]; });
}

}  // namespace shardtune::dist
