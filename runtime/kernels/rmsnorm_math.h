// RMSNorm's arithmetic, one row of n elements at a time, as the CUDA kernel (rmsnorm.cu) and the
// host reference (rmsnorm_reference.cpp) both compute it, in fp32:
//   inv = 1 / sqrt(sum(x^2) / n + eps)            y_i = w_i * (x_i * inv)
//   dx_i = inv * w_i * dy_i - x_i * inv^3 * mean_j(x_j * w_j * dy_j)
//   dw_i = sum over rows of dy_i * (x_i * inv)
// (Llama's RMSNorm: transformers rounds x_i * inv to the input dtype before the weight multiplies
// it; the kernels do too, and the gradient passes that rounding through unchanged, as autograd's.)
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/kernels/hd.h"

namespace shardtune::kernels {

ST_HD inline float rms_inverse(float sum_squares, int64_t n, float eps) {
  const float mean = sum_squares / static_cast<float>(n) + eps;
#ifdef __CUDA_ARCH__
  return 1.0f / sqrtf(mean);  // correctly rounded sqrt and division, as on the host
#else
  return 1.0f / std::sqrt(mean);
#endif
}

ST_HD inline float rmsnorm_grad_input(float x, float w, float dy, float inv, float mean_x_w_dy) {
  return inv * (w * dy) - x * (inv * inv * inv) * mean_x_w_dy;
}

}  // namespace shardtune::kernels
