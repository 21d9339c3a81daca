// bitsandbytes' dynamic maps.
#include "runtime/quant/dynamic_map.h"

#include <algorithm>
#include <cmath>
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

uint8_t search_code(const std::array<float, 256>& map, float x, float lower, bool ends_from_map) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float upper = 1.0f, val = map[127];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
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
  if (x > val) return static_cast<uint8_t>(x > (upper + val) * 0.5f ? upper_pivot : pivot);
  return static_cast<uint8_t>(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

}  // namespace shardtune::quant
