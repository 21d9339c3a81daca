// bitsandbytes' 8-bit dynamic maps (create_dynamic_map with its defaults: 7 exponent bits, 8
// bits): 256 ascending fp32 values, as torch's float32 linspace on the CPU builds them. The signed
// map (in [-1, 1]) codes NF4's double-quantised scales and the 8-bit optimizers' first moment; the
// unsigned one (in [0, 1]) their second moment. Plain C++: no LibTorch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace shardtune::quant {

// For each decade i = 0..6, the fp32 midpoints of linspace(0.1, 1, 2^i + 1) (signed; also
// negated) or of linspace(0.1, 1, 2^(i+1) + 1), times fp32(10^(i−6)); then 0 and 1; sorted.
const std::array<float, 256>& dynamic_map(bool is_signed);

// The code of x in `map` by bitsandbytes' binary search: seven halvings from code 127, then the
// nearer of the last pivot and its neighbour on x's side, by an fp32 midpoint with the search's
// bounds, which start at `lower` and 1. With `ends_from_map` (dQuantize, which codes NF4's
// scales), a bound the search never moved is the map's end value instead (quantize_2D, which codes
// the 8-bit optimizers' moments, keeps `lower` and 1). A NaN ends at code 0. Inline and without
// branches on x (selects the compiler makes conditional moves): an optimizer step codes every
// element twice, and a search's branches on data mispredict half the time.
inline uint8_t search_code(const std::array<float, 256>& map, float x, float lower, bool ends_from_map) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float upper = 1.0f, val = map[127];
  for (int i = 64; i > 0; i >>= 1) {
    const bool above = x > val;
    lower_pivot = above ? pivot : lower_pivot;
    lower = above ? val : lower;
    upper_pivot = above ? upper_pivot : pivot;
    upper = above ? upper : val;
    pivot = above ? pivot + i : pivot - i;
    val = map[static_cast<size_t>(pivot)];
  }
  if (ends_from_map && upper_pivot == 255) upper = map[255];
  if (ends_from_map && lower_pivot == 0) lower = map[0];
  const bool above = x > val;
  const int up = x > (upper + val) * 0.5f ? upper_pivot : pivot;
  const int down = x < (lower + val) * 0.5f ? lower_pivot : pivot;
  return static_cast<uint8_t>(above ? up : down);
}

// search_code for one map and start of its bounds, in a table lookup and a step or two. The search
// compares x only with a few hundred values (the map's values it visits and the midpoints it can
// end on, found by walking all 128 paths of its seven halvings): its code is the same for every x
// between two neighbouring such thresholds, and at each. A table over the top 16 bits of x gives
// the code of an interval of floats with no threshold in it, or the first threshold at or above the
// interval's start, from which x steps past the few thresholds the interval holds. Infinities and
// NaN take the search.
class CodeTable {
 public:
  CodeTable(const std::array<float, 256>& map, float lower, bool ends_from_map);
  uint8_t code(float x) const {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const uint16_t entry = table_[bits >> 16];
    if (entry < 256) return static_cast<uint8_t>(entry);
    if (entry == kSearch) return search_code(map_, x, lower_, ends_from_map_);
    size_t k = entry & kIndex;
    while (k < thresholds_.size() && thresholds_[k] < x) ++k;
    return k < thresholds_.size() && thresholds_[k] == x ? at_[k] : below_[k];
  }
  // Intervals with a threshold in them (for the tests and the record).
  int stepped_intervals() const;

 private:
  static constexpr uint16_t kSearch = 0xffff, kStep = 0x8000, kIndex = 0x7fff;
  std::array<float, 256> map_;
  float lower_;
  bool ends_from_map_;
  std::vector<float> thresholds_;  // sorted, distinct
  std::vector<uint8_t> at_;        // the code at each threshold
  std::vector<uint8_t> below_;     // the code between threshold k - 1 and k (one more: above the last)
  std::vector<uint16_t> table_;    // 65536 entries: a code, kStep | first threshold's index, or kSearch
};

}  // namespace shardtune::quant
