// A gradient element as fp32, for the host optimizer loops that read fp32 or bf16 gradients: bf16
// comes as its 16 bits and widens exactly.
#pragma once

#include <cstdint>
#include <cstring>

namespace shardtune::kernels {

inline float widen(float g) { return g; }
inline float widen(uint16_t bf16) {
  const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace shardtune::kernels
