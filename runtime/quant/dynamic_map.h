// bitsandbytes' 8-bit dynamic maps (create_dynamic_map with its defaults: 7 exponent bits, 8
// bits): 256 ascending fp32 values, as torch's float32 linspace on the CPU builds them. The signed
// map (in [-1, 1]) codes NF4's double-quantised scales and the 8-bit optimizers' first moment; the
// unsigned one (in [0, 1]) their second moment. Plain C++: no LibTorch.
#pragma once

#include <array>
#include <cstdint>

namespace shardtune::quant {

// For each decade i = 0..6, the fp32 midpoints of linspace(0.1, 1, 2^i + 1) (signed; also
// negated) or of linspace(0.1, 1, 2^(i+1) + 1), times fp32(10^(i−6)); then 0 and 1; sorted.
const std::array<float, 256>& dynamic_map(bool is_signed);

// The code of x in `map` by bitsandbytes' binary search: seven halvings from code 127, then the
// nearer of the last pivot and its neighbour on x's side, by an fp32 midpoint with the search's
// bounds, which start at `lower` and 1. With `ends_from_map` (dQuantize, which codes NF4's
// scales), a bound the search never moved is the map's end value instead (quantize_2D, which codes
// the 8-bit optimizers' moments, keeps `lower` and 1). A NaN ends at code 0.
uint8_t search_code(const std::array<float, 256>& map, float x, float lower, bool ends_from_map);

}  // namespace shardtune::quant
