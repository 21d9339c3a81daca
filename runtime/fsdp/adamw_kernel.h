// AdamW's element update in one pass over fp32 state: each element's parameter, gradient and two
// moments are read once and written once (28 bytes an element with fp32 gradients), where an
// operation at a time reads and writes them about ten times. Plain loops the compiler vectorises,
// without contracting multiplies and adds: an element's result does not depend on where it falls
// in the loop (vector body or tail), so a shard updated alone equals the same elements of the
// whole tensor, bit for bit.
#pragma once

#include <cstdint>

namespace shardtune::fsdp {

// The step's scalars, in fp32 as the update uses them.
struct AdamWScalars {
  float decay;                  // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;          // -lr / (1 - beta1^step)
  float grad_scale = 1.0f;      // each gradient is taken times this (clipping); 1 changes nothing
};

// Elements [0, n), g = grad·grad_scale (rounded to fp32, as a clipping multiply would round it):
//                   p ← p·decay;  m ← m·β1 + (1−β1)·g;  v ← v·β2 + (1−β2)·g·g;
//                   p ← p + (−step_size)·(m / (√v / √bc2 + eps)),
// the operations of torch.optim.AdamW's single-tensor path, each rounded to fp32. LibTorch's own
// kernels may round differently (a fused multiply-add, a reciprocal), so the two agree to a few
// units in the last place, not bitwise.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s);
// The same with bf16 gradients (their bits; widened to fp32 exactly).
void adamw_update(float* p, const uint16_t* g_bf16, float* m, float* v, int64_t n, const AdamWScalars& s);

}  // namespace shardtune::fsdp
