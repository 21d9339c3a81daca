// RMSNorm in float64, op by op from its definition: the exact answer the kernels' host reference
// (tests/unit/kernels_reference_test.cpp) and the CUDA kernels (tests/gpu/kernels_gpu_test.cu)
// are held to.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace shardtune::kernels {

inline constexpr double kU = 1.0 / (1 << 24);  // fp32 unit roundoff

struct Exact {
  std::vector<double> y, inv, dx, dw;
  std::vector<double> y_scale, dx_scale, dw_scale;  // sums of magnitudes each result is made of
};

// RMSNorm in float64, op by op: y = w * x * inv, inv = 1 / sqrt(mean(x^2) + eps); and the
// gradients of sum(y * dy).
inline Exact rmsnorm_exact(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy,
                    int64_t rows, int64_t n, double eps) {
  Exact e;
  e.y.resize(x.size());
  e.dx.resize(x.size());
  e.y_scale.resize(x.size());
  e.dx_scale.resize(x.size());
  e.dw.assign(n, 0.0);
  e.dw_scale.assign(n, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0, dot = 0, dot_abs = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[r * n + i];
      ss += v * v;
      dot += v * w[i] * dy[r * n + i];
      dot_abs += std::abs(v * w[i] * dy[r * n + i]);
    }
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    e.inv.push_back(inv);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(r * n + i);
      const double xi = x[k], wi = w[i], dyi = dy[k];
      e.y[k] = wi * xi * inv;
      e.y_scale[k] = std::abs(e.y[k]);
      e.dx[k] = inv * wi * dyi - xi * inv * inv * inv * dot / n;
      e.dx_scale[k] = std::abs(inv * wi * dyi) + std::abs(xi) * inv * inv * inv * dot_abs / n;
      e.dw[i] += dyi * xi * inv;
      e.dw_scale[i] += std::abs(dyi * xi * inv);
    }
  }
  return e;
}

}  // namespace shardtune::kernels
