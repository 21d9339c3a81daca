// AdamW's fused element update on the host, in one pass over fp32 state: each element's
// parameter, gradient and two moments are read once and written once (28 bytes an element with
// fp32 gradients), where an operation at a time reads and writes them about ten times. Plain loops
// the compiler vectorises over adamw_math.h's arithmetic, without contracting multiplies and adds:
// an element's result does not depend on where it falls in the loop (vector body or tail), so a
// shard updated alone equals the same elements of the whole tensor, bit for bit, and the CUDA
// kernel (adamw_cuda.h) gives the same bits. No ATen.
#pragma once

#include <cstdint>

#include "runtime/kernels/adamw_math.h"

namespace shardtune::kernels {

// Elements [0, n) (adamw_element each). LibTorch's own kernels may round differently (a fused
// multiply-add, a reciprocal), so they agree with these to a few units in the last place, not
// bitwise.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s);
// The same with bf16 gradients (their bits; widened to fp32 exactly).
void adamw_update(float* p, const uint16_t* g_bf16, float* m, float* v, int64_t n, const AdamWScalars& s);

}  // namespace shardtune::kernels
