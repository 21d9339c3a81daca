// bitsandbytes' dynamic maps.
#include "runtime/quant/dynamic_map.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"

namespace shardtune::quant {
namespace {

// torch.linspace(0.1, 1, n, dtype=float32) on the CPU: each half from its own end, one fused
// multiply-add per value (as x86 builds of torch >= 2.0 compute it).
std::vector<float> linspace(int n) {
  const float start = 0.1f, end = 1.0f, step = (end - start) / static_cast<float>(n - 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = i < n / 2 ? std::fma(step, static_cast<float>(i), start)
                                          : std::fma(-step, static_cast<float>(n - 1 - i), end);
  return v;
}

std::array<float, 256> make_map(bool is_signed) {
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const std::vector<float> b = linspace(is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1);
    const auto scale = static_cast<float>(std::pow(10.0, i - 6));
    for (size_t k = 0; k + 1 < b.size(); ++k) {
      const float mean = (b[k] + b[k + 1]) / 2.0f;
      data.push_back(scale * mean);
      if (is_signed) data.push_back(-(scale * mean));
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  ST_CHECK(data.size() == out.size(), common::ErrorKind::kInternal, "dynamic map of {} values", data.size());
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

}  // namespace

const std::array<float, 256>& dynamic_map(bool is_signed) {
  static const std::array<float, 256> kSigned = make_map(true), kUnsigned = make_map(false);
  return is_signed ? kSigned : kUnsigned;
}

namespace {

// Every value search_code compares x with, over all 128 paths of its halvings.
std::vector<float> thresholds(const std::array<float, 256>& map, float start_lower, bool ends_from_map) {
  std::vector<float> out;
  for (int path = 0; path < 128; ++path) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0, step = 6;
    float lower = start_lower, upper = 1.0f, val = map[127];
    for (int i = 64; i > 0; i >>= 1, --step) {
      out.push_back(val);
      const bool above = ((path >> step) & 1) != 0;
      if (above) {
        lower_pivot = pivot;
        lower = val;
        pivot += i;
      } else {
        upper_pivot = pivot;
        upper = val;
        pivot -= i;
      }
      val = map[static_cast<size_t>(pivot)];
    }
    if (ends_from_map && upper_pivot == 255) upper = map[255];
    if (ends_from_map && lower_pivot == 0) lower = map[0];
    out.insert(out.end(), {val, (upper + val) * 0.5f, (lower + val) * 0.5f});
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

CodeTable::CodeTable(const std::array<float, 256>& map, float lower, bool ends_from_map)
    : map_(map), lower_(lower), ends_from_map_(ends_from_map), thresholds_(thresholds(map, lower, ends_from_map)),
      table_(65536, kSearch) {
  ST_CHECK(thresholds_.size() < kIndex, common::ErrorKind::kInternal, "{} thresholds", thresholds_.size());
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t k = 0; k <= thresholds_.size(); ++k) {
    if (k < thresholds_.size()) at_.push_back(search_code(map, thresholds_[k], lower, ends_from_map));
    // Any float strictly between threshold k - 1 and k (none there: the code is never read).
    const float after = k == 0 ? -std::numeric_limits<float>::max() : std::nextafter(thresholds_[k - 1], inf);
    below_.push_back(search_code(map, after, lower, ends_from_map));
  }
  for (uint32_t top = 0; top < 65536; ++top) {
    if (((top >> 7) & 0xff) == 0xff) continue;  // infinities and NaN: the search
    const float a = from_bits(top << 16), b = from_bits((top << 16) | 0xffff);
    const float lo = std::min(a, b), hi = std::max(a, b);
    const auto first = std::lower_bound(thresholds_.begin(), thresholds_.end(), lo);  // the first >= lo
    table_[top] = first != thresholds_.end() && *first <= hi
                      ? static_cast<uint16_t>(kStep | (first - thresholds_.begin()))
                      : search_code(map, a, lower, ends_from_map);
  }
}

int CodeTable::stepped_intervals() const {
  return static_cast<int>(std::count_if(table_.begin(), table_.end(), [](uint16_t e) { return e >= 256 && e != kSearch; }));
}

}  // namespace shardtune::quant
