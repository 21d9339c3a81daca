// The CUDA kernels' host references (runtime/kernels), held to the exact answer: float64 computed
// op by op from the definition, on random rows of odd and long sizes and of small and large
// scale; values and gradients within a bound derived from fp32 rounding of the sums involved
// (u = 2^-24 a rounding, n-term sums γ_n ≈ n·u), and the float64 gradients themselves checked
// against central finite differences of the float64 forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels/cross_entropy_math.h"
#include "runtime/kernels/cross_entropy_reference.h"
#include "runtime/kernels/rmsnorm_reference.h"
#include "runtime/kernels/rope_math.h"
#include "runtime/kernels/rope_reference.h"
#include "runtime/kernels/swiglu_math.h"
#include "runtime/kernels/swiglu_reference.h"
#include "tests/unit/kernels_exact.h"

namespace shardtune::kernels {
namespace {

double loss_exact(const std::vector<double>& x, const std::vector<double>& w, const std::vector<float>& dy, int64_t rows,
                  int64_t n, double eps) {
  double loss = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) loss += w[i] * x[r * n + i] * inv * dy[r * n + i];
  }
  return loss;
}

struct Shape {
  int64_t rows, n;
};

const Shape kShapes[] = {{1, 1}, {3, 7}, {5, 17}, {2, 64}, {33, 65}, {2, 1023}, {4, 4097}, {2, 16384}};

TEST(KernelReference, RmsNormIsWithinFp32RoundingOfFloat64) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float eps = 1e-5f;
  for (const Shape& s : kShapes) {
    for (float scale : {1e-3f, 1.0f, 300.0f}) {
      SCOPED_TRACE(testing::Message() << s.rows << " x " << s.n << ", scale " << scale);
      std::vector<float> x(s.rows * s.n), w(s.n), dy(s.rows * s.n);
      for (float& v : x) v = scale * normal(rng);
      for (float& v : w) v = 1.0f + 0.1f * normal(rng);
      for (float& v : dy) v = normal(rng);
      std::vector<float> y(x.size()), inv(s.rows), dx(x.size()), dw(s.n);
      rmsnorm_forward_reference(x.data(), nullptr, nullptr, w.data(), y.data(), inv.data(), s.rows, s.n, eps);
      rmsnorm_backward_reference(x.data(), w.data(), inv.data(), dy.data(), nullptr, dx.data(), dw.data(), s.rows, s.n);
      const Exact e = rmsnorm_exact(x, w, dy, s.rows, s.n, eps);
      const double n = static_cast<double>(s.n), rows = static_cast<double>(s.rows);
      // The sum of squares carries γ_n; the square root halves it; a few more roundings follow.
      const double y_bound = (n / 2 + 8) * kU;
      for (int64_t r = 0; r < s.rows; ++r)
        ASSERT_LE(std::abs(inv[r] - e.inv[r]), y_bound * e.inv[r]) << "row " << r;
      for (size_t k = 0; k < y.size(); ++k)
        ASSERT_LE(std::abs(y[k] - e.y[k]), y_bound * e.y_scale[k] + 1e-30) << "y " << k;
      const double dx_bound = (2 * n + 16) * kU;
      for (size_t k = 0; k < dx.size(); ++k)
        ASSERT_LE(std::abs(dx[k] - e.dx[k]), dx_bound * e.dx_scale[k] + 1e-30) << "dx " << k;
      const double dw_bound = (rows + n / 2 + 16) * kU;
      for (int64_t i = 0; i < s.n; ++i)
        ASSERT_LE(std::abs(dw[i] - e.dw[i]), dw_bound * e.dw_scale[i] + 1e-30) << "dw " << i;
    }
  }
}

// The residual stream's forms: the norm of x + res is the plain norm of the sum rounded once, which
// it writes out; the input gradient plus dres is the plain one with dres added before its rounding.
// Both the same bits as the plain arithmetic on those inputs (held to float64 above), and each sum
// within a rounding of float64's.
TEST(KernelReference, RmsNormOfTheResidualSumIsThePlainNormWithOneMoreRounding) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float eps = 1e-5f;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << s.rows << " x " << s.n);
    const size_t count = static_cast<size_t>(s.rows * s.n);
    std::vector<float> x(count), res(count), w(s.n), dy(count), dres(count);
    for (float& v : x) v = normal(rng);
    for (float& v : res) v = 3 * normal(rng);
    for (float& v : w) v = 1.0f + 0.1f * normal(rng);
    for (float& v : dy) v = normal(rng);
    for (float& v : dres) v = normal(rng);
    std::vector<float> sum(count), y(count), inv(s.rows), dx(count), dw(s.n);
    rmsnorm_forward_reference(x.data(), res.data(), sum.data(), w.data(), y.data(), inv.data(), s.rows, s.n, eps);
    rmsnorm_backward_reference(sum.data(), w.data(), inv.data(), dy.data(), dres.data(), dx.data(), dw.data(), s.rows,
                               s.n);
    std::vector<float> plain_y(count), plain_inv(s.rows), plain_dx(count), plain_dw(s.n);
    for (size_t k = 0; k < count; ++k) {
      const double exact = static_cast<double>(x[k]) + res[k];
      ASSERT_LE(std::abs(sum[k] - exact), kU * std::abs(exact)) << "sum " << k;
    }
    rmsnorm_forward_reference(sum.data(), nullptr, nullptr, w.data(), plain_y.data(), plain_inv.data(), s.rows, s.n,
                              eps);
    rmsnorm_backward_reference(sum.data(), w.data(), plain_inv.data(), dy.data(), nullptr, plain_dx.data(),
                               plain_dw.data(), s.rows, s.n);
    EXPECT_EQ(std::memcmp(y.data(), plain_y.data(), count * 4), 0);
    EXPECT_EQ(std::memcmp(inv.data(), plain_inv.data(), inv.size() * 4), 0);
    EXPECT_EQ(std::memcmp(dw.data(), plain_dw.data(), dw.size() * 4), 0);
    for (size_t k = 0; k < count; ++k) {
      ASSERT_EQ(dx[k], plain_dx[k] + dres[k]) << "dx " << k;
      const double exact = static_cast<double>(plain_dx[k]) + dres[k];
      ASSERT_LE(std::abs(dx[k] - exact), kU * std::abs(exact)) << "dx " << k;
    }
  }
}

TEST(KernelReference, RmsNormFloat64GradientsMatchFiniteDifferences) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const double eps = 1e-5;
  for (const Shape& s : {Shape{1, 1}, Shape{3, 7}, Shape{2, 33}}) {
    std::vector<float> x(s.rows * s.n), w(s.n), dy(s.rows * s.n);
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = 1.0f + 0.1f * normal(rng);
    for (float& v : dy) v = normal(rng);
    const Exact e = rmsnorm_exact(x, w, dy, s.rows, s.n, eps);
    std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end());
    // Each element of `v` (x or w) moved by ±h: the loss's central difference against `grad`.
    auto check = [&](std::vector<double>& v, const std::vector<double>& grad, const char* what) {
      const double h = 1e-6;
      for (size_t k = 0; k < v.size(); ++k) {
        const double kept = v[k];
        v[k] = kept + h;
        const double up = loss_exact(xd, wd, dy, s.rows, s.n, eps);
        v[k] = kept - h;
        const double down = loss_exact(xd, wd, dy, s.rows, s.n, eps);
        v[k] = kept;
        const double numeric = (up - down) / (2 * h);
        EXPECT_NEAR(grad[k], numeric, 1e-6 * (1 + std::abs(numeric))) << s.rows << "x" << s.n << " " << what << " " << k;
      }
    };
    check(xd, e.dx, "dx");
    check(wd, e.dw, "dw");
  }
}

// A few fp32 roundings each (exp within 2 ulp, an add, a division, two multiplies; the gradient's
// 1 - s and its products): bounds of 8 and 16 u of the magnitudes involved, plus the underflow of
// a sigmoid of a large negative g (swiglu_underflow).
TEST(KernelReference, SwigluIsWithinFp32RoundingOfFloat64) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float scale : {1e-3f, 1.0f, 8.0f, 60.0f}) {
    SCOPED_TRACE(testing::Message() << "scale " << scale);
    const int64_t count = 10007;
    std::vector<float> g(count), u(count), dh(count);
    for (float& v : g) v = scale * normal(rng);
    for (float& v : u) v = normal(rng);
    for (float& v : dh) v = normal(rng);
    g[0] = -120.0f;  // exp overflows: the sigmoid is 0
    g[1] = 120.0f;   // the sigmoid is 1
    std::vector<float> h(count), dg(count), du(count);
    swiglu_forward_reference(SwigluLayout::contiguous(count), g.data(), u.data(), h.data());
    swiglu_backward_reference(SwigluLayout::contiguous(count), g.data(), u.data(), dh.data(), dg.data(), du.data());
    const SwigluExact e = swiglu_exact(g, u, dh);
    for (int64_t i = 0; i < count; ++i) {
      const double tiny = swiglu_underflow(g[i], u[i], dh[i]);
      ASSERT_LE(std::abs(h[i] - e.h[i]), 8 * kU * e.h_scale[i] + tiny) << "h " << i << " g " << g[i];
      ASSERT_LE(std::abs(dg[i] - e.dg[i]), 16 * kU * e.dg_scale[i] + tiny) << "dg " << i << " g " << g[i];
      ASSERT_LE(std::abs(du[i] - e.du[i]), 8 * kU * e.du_scale[i] + tiny) << "du " << i << " g " << g[i];
    }
  }
}

// Gate and up side by side in one (rows, 2 cols) product, their gradients written side by side:
// each element the same arithmetic as in separate arrays, bit for bit, at every shape (one row,
// one column, odd widths, a long row), and nothing outside the elements written.
TEST(KernelReference, SwigluJoinedLayoutIsTheSeparateArithmetic) {
  std::mt19937 rng(10);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << s.rows << " x " << s.n);
    const int64_t count = s.rows * s.n;
    std::vector<float> g(count), u(count), dh(count), gu(2 * count);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.n; ++c) {
        g[r * s.n + c] = gu[r * 2 * s.n + c] = normal(rng);
        u[r * s.n + c] = gu[r * 2 * s.n + s.n + c] = normal(rng);
      }
    for (float& v : dh) v = normal(rng);
    std::vector<float> h(count), dg(count), du(count), hj(count), dgu(2 * count, NAN);
    swiglu_forward_reference(SwigluLayout::contiguous(count), g.data(), u.data(), h.data());
    swiglu_backward_reference(SwigluLayout::contiguous(count), g.data(), u.data(), dh.data(), dg.data(), du.data());
    const SwigluLayout joined = SwigluLayout::joined(s.rows, s.n);
    swiglu_forward_reference(joined, gu.data(), gu.data() + s.n, hj.data());
    swiglu_backward_reference(joined, gu.data(), gu.data() + s.n, dh.data(), dgu.data(), dgu.data() + s.n);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.n; ++c) {
        const int64_t i = r * s.n + c;
        ASSERT_EQ(hj[i], h[i]) << "h " << r << ", " << c;
        ASSERT_EQ(dgu[r * 2 * s.n + c], dg[i]) << "dg " << r << ", " << c;
        ASSERT_EQ(dgu[r * 2 * s.n + s.n + c], du[i]) << "du " << r << ", " << c;
      }
  }
}

TEST(KernelReference, SwigluFloat64GradientsMatchFiniteDifferences) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int i = 0; i < 200; ++i) {
    const double g = normal(rng), u = normal(rng);
    const float dh = normal(rng);
    const SwigluExact e = swiglu_exact({static_cast<float>(g)}, {static_cast<float>(u)}, {dh});
    auto h = [&](double gg, double uu) { return gg / (1.0 + std::exp(-gg)) * uu * dh; };
    const double step = 1e-6;
    const double gf = static_cast<float>(g), uf = static_cast<float>(u);
    EXPECT_NEAR(e.dg[0], (h(gf + step, uf) - h(gf - step, uf)) / (2 * step), 1e-7 * (1 + std::abs(e.dg[0])));
    EXPECT_NEAR(e.du[0], (h(gf, uf + step) - h(gf, uf - step)) / (2 * step), 1e-7 * (1 + std::abs(e.du[0])));
  }
}

// Two products and a sum: within 4 u of the products' magnitudes, in place or not, forward and
// backward; and the backward is the forward's transpose (<R x, d> = <x, R^T d> in float64).
TEST(KernelReference, RopeIsWithinFp32RoundingOfFloat64AndItsGradientIsTheTranspose) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t shapes[][3] = {{1, 1, 2}, {3, 2, 8}, {7, 5, 64}, {33, 3, 128}};
  for (const auto& shape : shapes) {
    const int64_t positions = shape[0], heads = shape[1], head_dim = shape[2];
    std::vector<float> cos, sin;
    llama_rope_tables(positions, head_dim, cos, sin);
    std::vector<float> x(positions * heads * head_dim), d(x.size());
    for (float& v : x) v = normal(rng);
    for (float& v : d) v = normal(rng);
    for (bool backward : {false, true}) {
      SCOPED_TRACE(testing::Message() << positions << " x " << heads << " x " << head_dim << (backward ? " backward" : ""));
      std::vector<float> out(x.size()), in_place = x;
      const int64_t row = heads * head_dim;
      rope_reference(x.data(), cos.data(), sin.data(), out.data(), positions, heads, head_dim, row, row, backward);
      rope_reference(in_place.data(), cos.data(), sin.data(), in_place.data(), positions, heads, head_dim, row, row,
                     backward);
      EXPECT_EQ(in_place, out);
      // Columns of wider rows (q's or k's in the joined q, k, v product), in and out: the same
      // values, and nothing outside the columns written.
      const int64_t wide_in = row + 3 * head_dim + 5, wide_out = row + head_dim, in_first = 2 * head_dim + 1;
      std::vector<float> wide(positions * wide_in, -7.0f), strided(positions * wide_out, 9.0f);
      for (int64_t p = 0; p < positions; ++p)
        std::copy_n(x.begin() + p * row, row, wide.begin() + p * wide_in + in_first);
      rope_reference(wide.data() + in_first, cos.data(), sin.data(), strided.data(), positions, heads, head_dim, wide_in,
                     wide_out, backward);
      for (int64_t p = 0; p < positions; ++p) {
        ASSERT_TRUE(std::equal(out.begin() + p * row, out.begin() + (p + 1) * row, strided.begin() + p * wide_out));
        ASSERT_TRUE(std::all_of(strided.begin() + p * wide_out + row, strided.begin() + (p + 1) * wide_out,
                                [](float v) { return v == 9.0f; }));
      }
      const RopeExact e = rope_exact(x, cos, sin, positions, heads, head_dim, backward);
      for (size_t k = 0; k < out.size(); ++k) ASSERT_LE(std::abs(out[k] - e.out[k]), 4 * kU * e.scale[k]) << k;
    }
    const RopeExact rx = rope_exact(x, cos, sin, positions, heads, head_dim, false);
    const RopeExact rtd = rope_exact(d, cos, sin, positions, heads, head_dim, true);
    double lhs = 0, rhs = 0, mag = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      lhs += rx.out[k] * d[k];
      rhs += static_cast<double>(x[k]) * rtd.out[k];
      mag += std::abs(rx.out[k] * d[k]);
    }
    EXPECT_NEAR(lhs, rhs, 1e-12 * (1 + mag));
  }
}

// Rows of random logits, small to Llama 3's vocabulary, small to large scale, some rows ignored;
// the loss and the gradient (written in place and out of place, the same bits) within the bound of
// cross_entropy_exact.
// The packed kernels address packs of n elements (16 bytes: 8 bf16, 4 fp32) with the elementwise
// kernels' offset arithmetic over sizes in packs: element e of pack k must be where the elementwise
// kernel puts element k·n + e, for every shape the packed kernels take (sizes whole packs), and
// in 32-bit indices as the GPU runs them.
TEST(KernelReference, PackedOffsetsAreTheElementwiseOnes) {
  for (const uint32_t n : {4u, 8u}) {
    // SwiGLU: (rows, cols) of h; g, u (and their gradients) rows `stride` apart.
    const uint32_t swiglu_shapes[][3] = {{1, 8, 8}, {3, 16, 32}, {5, 24, 48}, {2, 64, 200}};
    for (const auto& [rows, cols, stride] : swiglu_shapes)
      for (uint32_t p = 0; p < rows * cols / n; ++p)
        for (uint32_t e = 0; e < n; ++e)
          ASSERT_EQ(swiglu_offset(p, cols / n, stride / n) * n + e, swiglu_offset(p * n + e, cols, stride))
              << "swiglu " << rows << " x " << cols << ", stride " << stride << ", pack " << p << " of " << n;
    // RoPE: (positions, heads, half a head), positions' rows packed or wider (whole packs).
    const uint32_t rope_shapes[][3] = {{1, 1, 8}, {3, 5, 32}, {7, 2, 64}, {2, 3, 16}};
    for (const auto& [positions, heads, half] : rope_shapes)
      for (const uint32_t extra : {0u, 8u, 24u}) {
        const uint32_t x_stride = heads * 2 * half + extra, out_stride = heads * 2 * half + 2 * extra;
        for (uint32_t k = 0; k < positions * heads * half / n; ++k)
          for (uint32_t e = 0; e < n; ++e) {
            const RopeOffsets<uint32_t> packed = rope_offsets(k, heads, half / n, x_stride / n, out_stride / n);
            const RopeOffsets<uint32_t> one = rope_offsets(k * n + e, heads, half, x_stride, out_stride);
            ASSERT_EQ(packed.x * n + e, one.x) << "rope pack " << k << " of " << n;
            ASSERT_EQ(packed.out * n + e, one.out) << "rope pack " << k << " of " << n;
            ASSERT_EQ(packed.t * n + e, one.t) << "rope pack " << k << " of " << n;
          }
      }
  }
  // Cross-entropy: thread t's runs, from t runs in every kCeLanes runs, are lane t's logits.
  const int64_t vocab = 3 * kCeLanes * kCeRun + 5 * kCeRun;
  std::vector<int> seen(static_cast<size_t>(vocab), 0);
  for (int64_t t = 0; t < kCeLanes; ++t)
    for (int64_t base = t * kCeRun; base < vocab; base += int64_t{kCeLanes} * kCeRun)
      for (int64_t k = 0; k < kCeRun; ++k) {
        ASSERT_EQ(ce_lane(base + k), t) << "logit " << base + k;
        ++seen[static_cast<size_t>(base + k)];
      }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << "every logit, once";
}

TEST(KernelReference, CrossEntropyIsWithinFp32RoundingOfFloat64) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Shape shapes[] = {{1, 1}, {3, 7}, {5, 1000}, {4, 32000}, {2, 128256}};
  for (const Shape& shape : shapes)
    for (float scale : {1e-3f, 1.0f, 30.0f}) {
      SCOPED_TRACE(testing::Message() << shape.rows << " x " << shape.n << ", scale " << scale);
      const int64_t rows = shape.rows, vocab = shape.n;
      std::vector<float> x(static_cast<size_t>(rows * vocab));
      for (float& v : x) v = scale * normal(rng);
      std::vector<int64_t> labels(static_cast<size_t>(rows));
      std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
      for (int64_t r = 0; r < rows; ++r) labels[r] = r % 3 == 2 ? -100 : pick(rng);
      std::vector<float> loss(static_cast<size_t>(rows)), grad(x.size()), in_place = x;
      cross_entropy_reference(x.data(), labels.data(), loss.data(), grad.data(), rows, vocab, -100);
      std::vector<float> loss2(loss.size());
      cross_entropy_reference(in_place.data(), labels.data(), loss2.data(), in_place.data(), rows, vocab, -100);
      ASSERT_EQ(loss, loss2);
      ASSERT_EQ(grad, in_place);
      const CrossEntropyExact e = cross_entropy_exact(x, labels, rows, vocab, -100);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_LE(std::abs(loss[r] - e.loss[r]), e.loss_bound[r] * kU) << "loss of row " << r;
      for (size_t k = 0; k < grad.size(); ++k)
        ASSERT_LE(std::abs(grad[k] - e.grad[k]), e.grad_bound[k] * kU + 1e-45) << "grad " << k;
    }
}

// A label outside the vocabulary (a tokenizer that does not match the model) makes the row's loss
// and gradient NaN, so the step's non-finite check stops it, instead of a read out of bounds.
TEST(KernelReference, CrossEntropyLabelOutOfRangeIsNaN) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, loss(2), grad(6);
  const std::vector<int64_t> labels = {3, -1};
  cross_entropy_reference(x.data(), labels.data(), loss.data(), grad.data(), 2, 3, -100);
  EXPECT_TRUE(std::isnan(loss[0]) && std::isnan(loss[1]));
  for (float g : grad) EXPECT_TRUE(std::isnan(g));
}

// The float64 gradient against central differences of the float64 loss.
TEST(KernelReference, CrossEntropyFloat64GradientMatchesFiniteDifferences) {
  std::mt19937 rng(19);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t vocab = 9;
  std::vector<float> x(vocab);
  for (float& v : x) v = normal(rng);
  const std::vector<int64_t> labels = {4};
  const CrossEntropyExact e = cross_entropy_exact(x, labels, 1, vocab, -100);
  auto loss = [&](const std::vector<double>& xd) {
    double s = 0;
    for (double v : xd) s += std::exp(v);
    return std::log(s) - xd[4];
  };
  const double step = 1e-6;
  for (int64_t j = 0; j < vocab; ++j) {
    std::vector<double> up(x.begin(), x.end()), down = up;
    up[j] += step;
    down[j] -= step;
    EXPECT_NEAR(e.grad[j], (loss(up) - loss(down)) / (2 * step), 1e-7) << j;
  }
}

}  // namespace
}  // namespace shardtune::kernels
