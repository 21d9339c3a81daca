// AdamW's element update, in fp32, as the CUDA kernel (adamw.cu) and the host loop
// (adamw_reference.cpp) both compute it: each operation rounded to fp32 on its own, never a
// multiply and an add contracted (both are built so), so the two give the same bits.
#pragma once

#include <cmath>

#include "runtime/kernels/hd.h"

namespace shardtune::kernels {

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

// One element, g = grad·grad_scale (rounded to fp32, as a clipping multiply would round it):
//   m ← m·β1 + g·(1−β1);  v ← v·β2 + (1−β2)·g·g;  p ← p·decay + (−step_size)·(m / (√v / √bc2 + eps)),
// the operations of torch.optim.AdamW's single-tensor path.
ST_HD inline void adamw_element(float& p, float grad, float& m, float& v, const AdamWScalars& c) {
  const float g = grad * c.grad_scale;
  const float mi = m * c.beta1 + g * c.one_minus_beta1;
  const float vi = v * c.beta2 + c.one_minus_beta2 * g * g;
  const float denom = sqrtf(vi) / c.bias_correction2_sqrt + c.eps;
  p = p * c.decay + c.neg_step_size * (mi / denom);
  m = mi;
  v = vi;
}

}  // namespace shardtune::kernels
