// The kernels' functions in float64, op by op from their definitions: the exact answers the host
// references (tests/unit/kernels_reference_test.cpp) and the CUDA kernels
// (tests/gpu/kernels_gpu_test.cu) are held to, with the magnitudes their rounding bounds scale by.
#pragma once

#include <algorithm>
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

// SwiGLU in float64: h = g * sigmoid(g) * u and the gradients of sum(h * dh); each scale bounds
// the magnitudes its result's fp32 terms are made of.
struct SwigluExact {
  std::vector<double> h, dg, du, h_scale, dg_scale, du_scale;
};

inline SwigluExact swiglu_exact(const std::vector<float>& g, const std::vector<float>& u, const std::vector<float>& dh) {
  SwigluExact e;
  for (size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i], ui = u[i], dhi = dh[i];
    const double s = 1.0 / (1.0 + std::exp(-gi));
    e.h.push_back(gi * s * ui);
    e.h_scale.push_back(std::abs(gi * s * ui));
    e.dg.push_back(dhi * ui * s * (1.0 + gi * (1.0 - s)));
    e.dg_scale.push_back(std::abs(dhi * ui) * s * (1.0 + std::abs(gi)));
    e.du.push_back(dhi * gi * s);
    e.du_scale.push_back(std::abs(dhi * gi * s));
  }
  return e;
}

// Where exp(-g) overflows fp32 (g < -88.7), the fp32 sigmoid is 0 while the exact one is below
// 2^-127: the absolute error that leaves in h, dg and du.
inline double swiglu_underflow(double g, double u, double dh) {
  return 6e-39 * (1 + std::abs(g)) * (1 + std::abs(u)) * (1 + std::abs(dh));
}

// Rotary embedding in float64 (rope_reference.h's layout): the rotation, or with `backward` its
// transpose, and each output's scale (the magnitudes of its two products).
struct RopeExact {
  std::vector<double> out, scale;
};

inline RopeExact rope_exact(const std::vector<float>& x, const std::vector<float>& cos, const std::vector<float>& sin,
                            int64_t positions, int64_t heads, int64_t head_dim, bool backward) {
  RopeExact e;
  e.out.assign(x.size(), 0.0);
  e.scale.assign(x.size(), 0.0);
  const int64_t half = head_dim / 2;
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const size_t a = static_cast<size_t>((p * heads + h) * head_dim + i), b = a + half;
        const size_t ta = static_cast<size_t>(p * head_dim + i), tb = ta + half;
        const double x1 = x[a], x2 = x[b], c1 = cos[ta], s1 = sin[ta], c2 = cos[tb], s2 = sin[tb];
        if (backward) {
          e.out[a] = x1 * c1 + x2 * s2;
          e.out[b] = x2 * c2 - x1 * s1;
          e.scale[a] = std::abs(x1 * c1) + std::abs(x2 * s2);
          e.scale[b] = std::abs(x2 * c2) + std::abs(x1 * s1);
        } else {
          e.out[a] = x1 * c1 - x2 * s1;
          e.out[b] = x2 * c2 + x1 * s2;
          e.scale[a] = std::abs(x1 * c1) + std::abs(x2 * s1);
          e.scale[b] = std::abs(x2 * c2) + std::abs(x1 * s2);
        }
      }
  return e;
}

// Llama's tables for `positions` positions: angle p * base^(-2i/d), both halves alike.
inline void llama_rope_tables(int64_t positions, int64_t head_dim, std::vector<float>& cos, std::vector<float>& sin) {
  cos.assign(static_cast<size_t>(positions * head_dim), 0.0f);
  sin = cos;
  const int64_t half = head_dim / 2;
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * std::pow(500000.0, -2.0 * static_cast<double>(i) / head_dim);
      for (int64_t j : {i, i + half}) {
        cos[static_cast<size_t>(p * head_dim + j)] = static_cast<float>(std::cos(angle));
        sin[static_cast<size_t>(p * head_dim + j)] = static_cast<float>(std::sin(angle));
      }
    }
}

// Cross-entropy in float64 of each row of logits against its label (ignored rows: 0), the
// gradient softmax - onehot, and the bound an fp32 computation grouped as cross_entropy_math.h
// meets: each (max, sum) pair is made of at most `steps` = ceil(vocab / 512) + 27 steps, each
// rounding the sum by up to 3 u relative (the exp, a rescaling, the addition), so the row's sum is
// within (3 steps + 8) u relative; that moves the log-sum-exp by as much plus a rounding of each
// term it is made of (lse_error), and each probability by lse_error plus the rounding of x - lse.
struct CrossEntropyExact {
  std::vector<double> loss, grad;
  std::vector<double> loss_bound, grad_bound;  // in units of u
};

inline CrossEntropyExact cross_entropy_exact(const std::vector<float>& x, const std::vector<int64_t>& labels, int64_t rows,
                                             int64_t vocab, int64_t ignore_index) {
  CrossEntropyExact e;
  e.grad.assign(x.size(), 0.0);
  e.grad_bound.assign(x.size(), 0.0);
  e.loss.assign(static_cast<size_t>(rows), 0.0);
  e.loss_bound.assign(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    if (labels[r] == ignore_index) continue;
    const float* xr = x.data() + r * vocab;
    double m = xr[0];
    for (int64_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(xr[j]));
    double s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(xr[j] - m);
    const double lse = m + std::log(s), label = xr[labels[r]];
    const double steps = static_cast<double>((vocab + 511) / 512 + 27);
    const double lse_error = (3.0 * steps + 8) + std::abs(m) + std::abs(lse) + std::abs(std::log(s));
    e.loss[r] = lse - label;
    e.loss_bound[r] = lse_error + std::abs(label) + std::abs(e.loss[r]);
    for (int64_t j = 0; j < vocab; ++j) {
      const double p = std::exp(xr[j] - lse);
      const bool is_label = j == labels[r];
      e.grad[r * vocab + j] = p - (is_label ? 1.0 : 0.0);
      e.grad_bound[r * vocab + j] = p * (lse_error + std::abs(xr[j] - lse) + 4) + (is_label ? 2.0 : 0.0);
    }
  }
  return e;
}

}  // namespace shardtune::kernels
