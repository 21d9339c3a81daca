// AdamW with both moments stored in 8 bits, block-wise, as bitsandbytes' AdamW8bit keeps them
// (Dettmers et al., "8-bit Optimizers via Block-wise Quantization"): each moment element is a
// code of a 256-value dynamic map (signed for the first moment, unsigned for the second), scaled
// by its block's absolute maximum, one fp32 per block of kAdam8bitBlock elements of a tensor.
//
// One step of a block, in fp32, in bitsandbytes' order (kOptimizerStatic8bit2StateBlockwise):
//   1. each moment is decoded (code · absmax) and updated: m ← m·β1 + (1−β1)·g,
//      v ← v·β2 + ((1−β2)·g)·g; a non-finite gradient zeroes both and leaves its parameter;
//   2. the block's new absmax is the largest |m| (|v|) of the block;
//   3. p ← p + step_size · m / (√v + c2·eps), step_size = (−lr·c2)/c1, c1 = 1 − β1^t,
//      c2 = √(1 − β2^t); then, with weight decay, p ← p·(1 − lr·wd);
//   4. m/absmax and v/absmax are encoded by bitsandbytes' binary search (quantize_2D), and a
//      first-moment code of the wrong sign moves one code toward the right one.
// Tensors of fewer than kMin8bitSize elements, and the token embedding, keep fp32 moments
// (bitsandbytes' 32-bit update; quantized_state).
// A tensor whose size is not a multiple of the block ends in a short block that bitsandbytes
// fills with phantom elements (first-moment code 128, second-moment code 0, gradient 0): they
// take part in the block's absmax there and here.
//
// Where this differs from bitsandbytes' CUDA kernel, by rounding only: c1 and c2 are worked out in
// double and rounded to fp32 (the kernel uses __powf), divisions are IEEE (the kernel's
// __fdividef is within 2 ulp), and nothing is contracted into fused multiply-adds (nvcc contracts
// by default). tools/reference/adam8bit.py computes the same as this file.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/quant/dynamic_map.h"
#include "runtime/quant/state_8bit.h"

namespace shardtune::fsdp {

// The block, and which tensors keep fp32 moments (updated by bitsandbytes' 32-bit Adam kernel,
// kOptimizer32bit2State): runtime/quant/state_8bit.h.
using quant::kAdam8bitBlock;
using quant::kMin8bitSize;
using quant::quantized_state;

// The code of x (a moment divided by its block's absmax) in `map` (runtime/quant/dynamic_map.h:
// signed for the first moment, unsigned for the second) as bitsandbytes' quantize_2D picks it:
// a binary search of seven halvings from code 127, then the nearer neighbour by midpoints (the
// search's bounds start at −1 (signed) or 0, and 1). A NaN (0/0: an all-zero block) ends at code 0.
uint8_t encode(const std::array<float, 256>& map, float x, bool is_signed);
// The same by table (quant::CodeTable), as the host loop codes: signed or unsigned map.
const quant::CodeTable& code_table(bool is_signed);

// The step's scalars in fp32.
struct Adam8bitScalars {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float c2_eps;     // c2 · eps
  float step_size;  // (−lr · c2) / c1
  float decay;      // 1 − lr · wd, applied when weight decay > 0
  bool decays;
};
Adam8bitScalars adam8bit_scalars(double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step);

// One step of the blocks of elements [0, n) of a tensor (or of a piece of one that starts at a
// block boundary): p, g (fp32, or bf16 bits) have n elements; c1, c2 have the blocks' codes
// (ceil(n / kAdam8bitBlock) · kAdam8bitBlock, those past n are phantoms on entry and hold the
// phantoms' new codes on return); a1, a2 one absmax per block.
void adam8bit_update(float* p, const float* g, uint8_t* c1, uint8_t* c2, float* a1, float* a2, int64_t n,
                     const Adam8bitScalars& s);
void adam8bit_update(float* p, const uint16_t* g_bf16, uint8_t* c1, uint8_t* c2, float* a1, float* a2, int64_t n,
                     const Adam8bitScalars& s);

// A small tensor's step (fewer than kMin8bitSize elements) with fp32 moments m, v, as bitsandbytes'
// 32-bit kernel takes it with the same scalars: m ← m·β1 + (1−β1)·g; v ← v·β2 + (1−β2)·(g·g);
// p ← p + step_size · m / (√v + c2·eps); then the decay. No check for non-finite gradients there.
void adam32bit_update(float* p, const float* g, float* m, float* v, int64_t n, const Adam8bitScalars& s);
void adam32bit_update(float* p, const uint16_t* g_bf16, float* m, float* v, int64_t n, const Adam8bitScalars& s);

}  // namespace shardtune::fsdp
