// The 8-bit block-wise Adam update (runtime/fsdp/adam8bit.h) in ATen operations, for any device:
// the same result as the host loop, element for element, where each operation rounds once (the
// test holds the two to each other bitwise on the CPU).
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/fsdp/adam8bit.h"

namespace shardtune::fsdp {

// The maps as fp32 tensors on `device`.
struct Adam8bitMaps {
  at::Tensor signed_map, unsigned_map;
};
Adam8bitMaps adam8bit_maps(at::Device device);

// p, g: n elements (p fp32 or bf16, g any floating dtype); c1, c2: uint8 codes of ceil(n / block)
// whole blocks; a1, a2: fp32, one per block. All on one device; updated in place. Works through
// the blocks a bounded piece at a time.
void adam8bit_update_ops(const at::Tensor& p, const at::Tensor& g, const at::Tensor& c1, const at::Tensor& c2,
                         const at::Tensor& a1, const at::Tensor& a2, const Adam8bitScalars& s,
                         const Adam8bitMaps& maps);

// adam32bit_update in ATen operations: p (fp32 or bf16), g any floating dtype, m and v fp32.
void adam32bit_update_ops(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v,
                          const Adam8bitScalars& s);

// The codes of x (any shape, fp32) as encode() picks them, as int32.
at::Tensor encode_ops(const at::Tensor& map, const at::Tensor& x, bool is_signed);

}  // namespace shardtune::fsdp
