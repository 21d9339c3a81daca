// RMSNorm on the host: the reference of the CUDA kernels, with their arithmetic (rmsnorm_math.h)
// and sums taken in index order.
#include "runtime/kernels/rmsnorm_reference.h"

#include "runtime/kernels/rmsnorm_math.h"

namespace shardtune::kernels {

void rmsnorm_forward_reference(const float* x, const float* res, float* sum, const float* w, float* y, float* inv,
                               int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    if (res != nullptr) {
      for (int64_t i = 0; i < n; ++i) sum[r * n + i] = xr[i] + res[r * n + i];
      xr = sum + r * n;
    }
    float ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    inv[r] = rms_inverse(ss, n, eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = w[i] * (xr[i] * inv[r]);
  }
}

void rmsnorm_backward_reference(const float* x, const float* w, const float* inv, const float* dy, const float* dres,
                                float* dx, float* dw, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dw[i] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* dyr = dy + r * n;
    float dot = 0;
    for (int64_t i = 0; i < n; ++i) dot += xr[i] * w[i] * dyr[i];
    const float mean = dot / static_cast<float>(n);
    for (int64_t i = 0; i < n; ++i) {
      const float g = rmsnorm_grad_input(xr[i], w[i], dyr[i], inv[r], mean);
      dx[r * n + i] = dres != nullptr ? g + dres[r * n + i] : g;
      dw[i] += dyr[i] * (xr[i] * inv[r]);
    }
  }
}

}  // namespace shardtune::kernels
