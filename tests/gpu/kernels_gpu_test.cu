// The CUDA kernels on a GPU, held to the exact answer (float64, tests/unit/kernels_exact.h) within
// the bounds their host reference meets, plus the bf16 roundings where the arrays are bf16; and
// the weight gradient's bits equal across reruns. Exits 77 (skipped) where no GPU is visible.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels/adamw_cuda.h"
#include "runtime/kernels/adamw_reference.h"
#include "runtime/kernels/cross_entropy_cuda.h"
#include "runtime/kernels/device_util.cuh"
#include "runtime/kernels/rmsnorm_cuda.h"
#include "runtime/kernels/rope_cuda.h"
#include "runtime/kernels/swiglu_cuda.h"
#include "tests/unit/kernels_exact.h"

namespace {

using namespace shardtune::kernels;

int failures = 0;
std::map<std::string, int> failures_of;  // by check, each printed for its first 5

void expect(bool ok, const char* what, int64_t rows, int64_t n, bool bf16, size_t k, double got, double want) {
  if (ok) return;
  ++failures;
  if (++failures_of[what] <= 5)
    std::printf("FAIL %s: %lld x %lld %s, element %zu: %.9g, exact %.9g\n", what, static_cast<long long>(rows),
                static_cast<long long>(n), bf16 ? "bf16" : "fp32", k, got, want);
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// A device array of `values` as fp32 or bf16; `values` become what the device holds.
void* upload(std::vector<float>& values, bool bf16) {
  void* d = nullptr;
  const size_t bytes = values.size() * (bf16 ? 2 : 4) + 4;
  check(cudaMalloc(&d, bytes), "cudaMalloc");
  if (bf16) {
    std::vector<__nv_bfloat16> b(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      b[i] = __float2bfloat16_rn(values[i]);
      values[i] = __bfloat162float(b[i]);
    }
    check(cudaMemcpy(d, b.data(), b.size() * 2, cudaMemcpyHostToDevice), "upload");
  } else {
    check(cudaMemcpy(d, values.data(), values.size() * 4, cudaMemcpyHostToDevice), "upload");
  }
  return d;
}

std::vector<float> download(const void* d, size_t count, bool bf16) {
  std::vector<float> out(count);
  if (bf16) {
    std::vector<__nv_bfloat16> b(count);
    check(cudaMemcpy(b.data(), d, count * 2, cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < count; ++i) out[i] = __bfloat162float(b[i]);
  } else {
    check(cudaMemcpy(out.data(), d, count * 4, cudaMemcpyDeviceToHost), "download");
  }
  return out;
}

void test_rmsnorm(int64_t rows, int64_t n, float scale, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * n), w(n), dy(rows * n);
  for (float& v : x) v = scale * normal(rng);
  for (float& v : w) v = 1.0f + 0.1f * normal(rng);
  for (float& v : dy) v = normal(rng);
  const float eps = 1e-5f;
  void* dx_in = upload(x, bf16);
  void* dw_in = upload(w, bf16);
  void* ddy = upload(dy, bf16);
  std::vector<float> zeros(x.size());
  void* dy_out = upload(zeros, bf16);
  void* dx_out = upload(zeros, bf16);
  float *inv = nullptr, *dw = nullptr, *workspace = nullptr;
  check(cudaMalloc(&inv, rows * 4 + 4), "cudaMalloc");
  check(cudaMalloc(&dw, n * 4 + 4), "cudaMalloc");
  check(cudaMalloc(&workspace, rmsnorm_backward_workspace(rows, n) * 4 + 4), "cudaMalloc");
  const Dtype dtype = bf16 ? Dtype::kBFloat16 : Dtype::kFloat;
  rmsnorm_forward_cuda(dtype, dx_in, nullptr, nullptr, dw_in, dy_out, inv, rows, n, eps, nullptr);
  rmsnorm_backward_cuda(dtype, dx_in, dw_in, inv, ddy, nullptr, dx_out, dw, workspace, rows, n, nullptr);
  check(cudaDeviceSynchronize(), "the kernels");
  const std::vector<float> y = download(dy_out, x.size(), bf16), dx = download(dx_out, x.size(), bf16);
  const std::vector<float> grad_w = download(dw, n, false);
  rmsnorm_backward_cuda(dtype, dx_in, dw_in, inv, ddy, nullptr, dx_out, dw, workspace, rows, n, nullptr);
  check(cudaDeviceSynchronize(), "the kernels, again");
  const std::vector<float> again = download(dw, n, false);
  expect(std::memcmp(again.data(), grad_w.data(), n * 4) == 0, "dw bits across reruns", rows, n, bf16, 0, 0, 0);

  const Exact e = rmsnorm_exact(x, w, dy, rows, n, eps);
  const double rn = static_cast<double>(n), rr = static_cast<double>(rows);
  const double b16 = bf16 ? 1.0 / 256 : 0.0;  // a bf16 rounding, relative
  for (size_t k = 0; k < y.size(); ++k)
    expect(std::abs(y[k] - e.y[k]) <= ((rn / 2 + 8) * kU + 2 * b16) * e.y_scale[k] + 1e-30, "y", rows, n, bf16, k, y[k],
           e.y[k]);
  for (size_t k = 0; k < dx.size(); ++k)
    expect(std::abs(dx[k] - e.dx[k]) <= ((2 * rn + 16) * kU + b16) * e.dx_scale[k] + 1e-30, "dx", rows, n, bf16, k,
           dx[k], e.dx[k]);
  for (int64_t i = 0; i < n; ++i)
    expect(std::abs(grad_w[i] - e.dw[i]) <= ((rr + rn / 2 + 16) * kU + b16) * e.dw_scale[i] + 1e-30, "dw", rows, n,
           bf16, i, grad_w[i], e.dw[i]);
  for (void* p : {dx_in, dw_in, ddy, dy_out, dx_out, static_cast<void*>(inv), static_cast<void*>(dw),
                  static_cast<void*>(workspace)})
    cudaFree(p);
}

// The residual stream's forms against the plain kernels: the norm of x + res writes the sum rounded
// once to the dtype (within a rounding of float64's) and the plain norm of that sum, the same bits;
// the input gradient plus dres is within the plain bound of float64's plus a rounding of the sum.
void test_rmsnorm_residual(int64_t rows, int64_t n, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t count = static_cast<size_t>(rows * n);
  std::vector<float> x(count), res(count), w(n), dy(count), dres(count), zeros(count);
  for (float& v : x) v = normal(rng);
  for (float& v : res) v = 3 * normal(rng);
  for (float& v : w) v = 1.0f + 0.1f * normal(rng);
  for (float& v : dy) v = normal(rng);
  for (float& v : dres) v = normal(rng);
  const float eps = 1e-5f;
  void *d_x = upload(x, bf16), *d_res = upload(res, bf16), *d_w = upload(w, bf16), *d_dy = upload(dy, bf16);
  void *d_dres = upload(dres, bf16), *d_sum = upload(zeros, bf16), *d_y = upload(zeros, bf16);
  void *d_plain_y = upload(zeros, bf16), *d_dx = upload(zeros, bf16);
  float *inv = nullptr, *plain_inv = nullptr, *dw = nullptr, *workspace = nullptr;
  check(cudaMalloc(&inv, rows * 4 + 4), "cudaMalloc");
  check(cudaMalloc(&plain_inv, rows * 4 + 4), "cudaMalloc");
  check(cudaMalloc(&dw, n * 4 + 4), "cudaMalloc");
  check(cudaMalloc(&workspace, rmsnorm_backward_workspace(rows, n) * 4 + 4), "cudaMalloc");
  const Dtype dtype = bf16 ? Dtype::kBFloat16 : Dtype::kFloat;
  rmsnorm_forward_cuda(dtype, d_x, d_res, d_sum, d_w, d_y, inv, rows, n, eps, nullptr);
  rmsnorm_forward_cuda(dtype, d_sum, nullptr, nullptr, d_w, d_plain_y, plain_inv, rows, n, eps, nullptr);
  rmsnorm_backward_cuda(dtype, d_sum, d_w, inv, d_dy, d_dres, d_dx, dw, workspace, rows, n, nullptr);
  check(cudaDeviceSynchronize(), "the residual kernels");
  const std::vector<float> sum = download(d_sum, count, bf16), y = download(d_y, count, bf16);
  const std::vector<float> plain_y = download(d_plain_y, count, bf16), dx = download(d_dx, count, bf16);
  const std::vector<float> inv_h = download(inv, rows, false), plain_inv_h = download(plain_inv, rows, false);
  const double unit = bf16 ? 1.0 / 256 : kU;  // a rounding to the dtype, relative
  for (size_t k = 0; k < count; ++k) {
    const double exact = static_cast<double>(x[k]) + res[k];
    expect(std::abs(sum[k] - exact) <= unit * std::abs(exact), "residual sum", rows, n, bf16, k, sum[k], exact);
  }
  expect(std::memcmp(y.data(), plain_y.data(), count * 4) == 0, "residual y bits", rows, n, bf16, 0, 0, 0);
  expect(std::memcmp(inv_h.data(), plain_inv_h.data(), rows * 4) == 0, "residual inv bits", rows, n, bf16, 0, 0, 0);
  const Exact e = rmsnorm_exact(sum, w, dy, rows, n, eps);
  const double rn = static_cast<double>(n);
  for (size_t k = 0; k < count; ++k) {
    const double want = e.dx[k] + dres[k];
    const double bound = (2 * rn + 16) * kU * e.dx_scale[k] + unit * (std::abs(e.dx[k]) + std::abs(dres[k]));
    expect(std::abs(dx[k] - want) <= bound + 1e-30, "residual dx", rows, n, bf16, k, dx[k], want);
  }
  for (void* p : {d_x, d_res, d_w, d_dy, d_dres, d_sum, d_y, d_plain_y, d_dx, static_cast<void*>(inv),
                  static_cast<void*>(plain_inv), static_cast<void*>(dw), static_cast<void*>(workspace)})
    cudaFree(p);
}

void test_swiglu(int64_t count, float scale, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(count), u(count), dh(count);
  for (float& v : g) v = scale * normal(rng);
  for (float& v : u) v = normal(rng);
  for (float& v : dh) v = normal(rng);
  if (count > 2) {
    g[0] = -120.0f;
    g[1] = 120.0f;
  }
  void* dg_in = upload(g, bf16);
  void* du_in = upload(u, bf16);
  void* ddh = upload(dh, bf16);
  std::vector<float> zeros(count);
  void* dh_out = upload(zeros, bf16);
  void* dg_out = upload(zeros, bf16);
  void* du_out = upload(zeros, bf16);
  const Dtype dtype = bf16 ? Dtype::kBFloat16 : Dtype::kFloat;
  swiglu_forward_cuda(dtype, SwigluLayout::contiguous(count), dg_in, du_in, dh_out, nullptr);
  swiglu_backward_cuda(dtype, SwigluLayout::contiguous(count), dg_in, du_in, ddh, dg_out, du_out, nullptr);
  check(cudaDeviceSynchronize(), "the kernels");
  const std::vector<float> h = download(dh_out, count, bf16), gg = download(dg_out, count, bf16),
                           gu = download(du_out, count, bf16);
  const SwigluExact e = swiglu_exact(g, u, dh);
  const double b16 = bf16 ? 1.0 / 256 : 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double tiny = swiglu_underflow(g[i], u[i], dh[i]);
    expect(std::abs(h[i] - e.h[i]) <= (8 * kU + b16) * e.h_scale[i] + tiny, "swiglu h", count, 1, bf16, i, h[i], e.h[i]);
    expect(std::abs(gg[i] - e.dg[i]) <= (16 * kU + b16) * e.dg_scale[i] + tiny, "swiglu dg", count, 1, bf16, i, gg[i],
           e.dg[i]);
    expect(std::abs(gu[i] - e.du[i]) <= (8 * kU + b16) * e.du_scale[i] + tiny, "swiglu du", count, 1, bf16, i, gu[i],
           e.du[i]);
  }
  for (void* p : {dg_in, du_in, ddh, dh_out, dg_out, du_out}) cudaFree(p);
}

// Gate and up side by side in one (rows, 2 cols) array, their gradients written side by side into
// one: each element within the same bounds of float64 as the separate arrays', and every element of
// the joined gradient written.
void test_swiglu_joined(int64_t rows, int64_t cols, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t count = rows * cols;
  std::vector<float> gu(2 * count), dh(count);
  for (float& v : gu) v = normal(rng);
  for (float& v : dh) v = normal(rng);
  void* dgu_in = upload(gu, bf16);
  void* ddh = upload(dh, bf16);
  std::vector<float> g(count), u(count), zeros(count), nans(2 * count, NAN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      g[r * cols + c] = gu[r * 2 * cols + c];
      u[r * cols + c] = gu[r * 2 * cols + cols + c];
    }
  void* dh_out = upload(zeros, bf16);
  void* dgu_out = upload(nans, bf16);
  const Dtype dtype = bf16 ? Dtype::kBFloat16 : Dtype::kFloat;
  const SwigluLayout layout = SwigluLayout::joined(rows, cols);
  const size_t half = static_cast<size_t>(cols) * (bf16 ? 2 : 4);
  swiglu_forward_cuda(dtype, layout, dgu_in, static_cast<char*>(dgu_in) + half, dh_out, nullptr);
  swiglu_backward_cuda(dtype, layout, dgu_in, static_cast<char*>(dgu_in) + half, ddh, dgu_out,
                       static_cast<char*>(dgu_out) + half, nullptr);
  check(cudaDeviceSynchronize(), "the joined kernels");
  const std::vector<float> h = download(dh_out, count, bf16), dgu = download(dgu_out, 2 * count, bf16);
  const SwigluExact e = swiglu_exact(g, u, dh);
  const double b16 = bf16 ? 1.0 / 256 : 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const double dg = dgu[r * 2 * cols + c], du = dgu[r * 2 * cols + cols + c];
      const double tiny = swiglu_underflow(g[i], u[i], dh[i]);
      expect(std::abs(h[i] - e.h[i]) <= (8 * kU + b16) * e.h_scale[i] + tiny, "swiglu joined h", rows, cols, bf16, i,
             h[i], e.h[i]);
      expect(std::abs(dg - e.dg[i]) <= (16 * kU + b16) * e.dg_scale[i] + tiny, "swiglu joined dg", rows, cols, bf16, i,
             dg, e.dg[i]);
      expect(std::abs(du - e.du[i]) <= (8 * kU + b16) * e.du_scale[i] + tiny, "swiglu joined du", rows, cols, bf16, i,
             du, e.du[i]);
    }
  for (void* p : {dgu_in, ddh, dh_out, dgu_out}) cudaFree(p);
}

// The packed kernels (16 bytes an access, where the arrays start on 16 bytes) and the elementwise
// ones (one element an access, here because every array starts one element late) share their
// arithmetic: the same bits out of both.
void test_swiglu_paths(int64_t count, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> g(count + 1), u(count + 1), dh(count + 1), zeros(count + 1);
  for (std::vector<float>* a : {&g, &u, &dh})
    for (float& v : *a) v = normal(rng);
  const size_t width = bf16 ? 2 : 4;
  void* arrays[6];
  for (int k = 0; k < 6; ++k) arrays[k] = upload(k == 0 ? g : k == 1 ? u : k == 2 ? dh : zeros, bf16);
  const Dtype dtype = bf16 ? Dtype::kBFloat16 : Dtype::kFloat;
  std::vector<float> results[2][3];
  for (int late = 0; late < 2; ++late) {
    char* p[6];
    for (int k = 0; k < 6; ++k) p[k] = static_cast<char*>(arrays[k]) + late * width;
    swiglu_forward_cuda(dtype, SwigluLayout::contiguous(count), p[0], p[1], p[3], nullptr);
    swiglu_backward_cuda(dtype, SwigluLayout::contiguous(count), p[0], p[1], p[2], p[4], p[5], nullptr);
    check(cudaDeviceSynchronize(), "the kernels");
    for (int k = 0; k < 3; ++k) results[late][k] = download(p[3 + k], count, bf16);
  }
  const char* names[3] = {"swiglu paths h", "swiglu paths dg", "swiglu paths du"};
  // Element i of the late run is element i + 1 of the aligned one.
  for (int k = 0; k < 3; ++k)
    for (int64_t i = 0; i + 1 < count; ++i)
      expect(std::memcmp(&results[0][k][i + 1], &results[1][k][i], 4) == 0, names[k], count, 1, bf16, i,
             results[1][k][i], results[0][k][i + 1]);
  for (void* a : arrays) cudaFree(a);
}

// Out of place and in place, forward and backward; and from and into columns of wider rows (as q's
// and k's of the joined q, k, v product): the same bits as packed rows, nothing else written.
void test_rope(int64_t positions, int64_t heads, int64_t head_dim, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> cos, sin, x(positions * heads * head_dim);
  llama_rope_tables(positions, head_dim, cos, sin);
  for (float& v : x) v = normal(rng);
  void* dx = upload(x, bf16);
  void* dcos = upload(cos, bf16);
  void* dsin = upload(sin, bf16);
  std::vector<float> zeros(x.size());
  void* dout = upload(zeros, bf16);
  const Dtype dtype = bf16 ? Dtype::kBFloat16 : Dtype::kFloat;
  const double b16 = bf16 ? 1.0 / 256 : 0.0;
  const int64_t row = heads * head_dim;
  // Wider rows: 3 heads more in, 1 more out (whole packs where head_dim is), the columns 2 heads in.
  const int64_t wide_in = row + 3 * head_dim, wide_out = row + head_dim, first = 2 * head_dim;
  std::vector<float> wide(positions * wide_in, -7.0f), sentinel(positions * wide_out, 9.0f);
  for (int64_t p = 0; p < positions; ++p) std::copy_n(x.begin() + p * row, row, wide.begin() + p * wide_in + first);
  void* dwide = upload(wide, bf16);
  const size_t bytes = bf16 ? 2 : 4;
  for (bool backward : {false, true}) {
    rope_cuda(dtype, dx, dcos, dsin, dout, positions, heads, head_dim, row, row, backward, nullptr);
    check(cudaDeviceSynchronize(), "the kernel");
    const std::vector<float> out = download(dout, x.size(), bf16);
    const RopeExact e = rope_exact(x, cos, sin, positions, heads, head_dim, backward);
    for (size_t k = 0; k < out.size(); ++k)
      expect(std::abs(out[k] - e.out[k]) <= (4 * kU + b16) * e.scale[k] + 1e-38, backward ? "rope backward" : "rope",
             positions, head_dim, bf16, k, out[k], e.out[k]);
    void* dstrided = upload(sentinel, bf16);
    rope_cuda(dtype, static_cast<char*>(dwide) + first * bytes, dcos, dsin, dstrided, positions, heads, head_dim,
              wide_in, wide_out, backward, nullptr);
    check(cudaDeviceSynchronize(), "the kernel, strided");
    const std::vector<float> strided = download(dstrided, sentinel.size(), bf16);
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t c = 0; c < wide_out; ++c) {
        const float got = strided[p * wide_out + c], want = c < row ? out[p * row + c] : 9.0f;
        expect(std::memcmp(&got, &want, 4) == 0, "rope strided", positions, head_dim, bf16, p * wide_out + c, got,
               want);
      }
    cudaFree(dstrided);
  }
  cudaFree(dwide);
  rope_cuda(dtype, dx, dcos, dsin, dx, positions, heads, head_dim, row, row, false, nullptr);  // in place
  check(cudaDeviceSynchronize(), "the kernel, in place");
  const std::vector<float> in_place = download(dx, x.size(), bf16);
  const RopeExact e = rope_exact(x, cos, sin, positions, heads, head_dim, false);
  for (size_t k = 0; k < in_place.size(); ++k)
    expect(std::abs(in_place[k] - e.out[k]) <= (4 * kU + b16) * e.scale[k] + 1e-38, "rope in place", positions,
           head_dim, bf16, k, in_place[k], e.out[k]);
  for (void* p : {dx, dcos, dsin, dout}) cudaFree(p);
}

// CUDA's expf is not accurate where its result is subnormal (it flushes some to zero), and so below
// the smallest normal float a gradient element may be off by as much as that: on an H200,
// 2026-11-29, elements whose exact value was 1e-45 to 1e-39 came back 0 or 3% off. No training
// reads an element that small; every element of at least that size is held to the bound.
constexpr double kFloatMin = 1.1754943508222875e-38;

// The loss of each row and the gradient written over the logits, some rows ignored, one with a
// label out of range (NaN, not a read out of bounds).
void test_cross_entropy(int64_t rows, int64_t vocab, float scale, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<float> x(rows * vocab);
  for (float& v : x) v = scale * normal(rng);
  std::vector<int64_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) labels[r] = r % 3 == 2 ? -100 : pick(rng);
  if (rows > 3) labels[3] = vocab;
  void* dx = upload(x, bf16);
  int64_t* dlabels = nullptr;
  float* dloss = nullptr;
  check(cudaMalloc(&dlabels, rows * 8), "cudaMalloc");
  check(cudaMalloc(&dloss, rows * 4), "cudaMalloc");
  check(cudaMemcpy(dlabels, labels.data(), rows * 8, cudaMemcpyHostToDevice), "upload");
  cross_entropy_cuda(bf16 ? Dtype::kBFloat16 : Dtype::kFloat, dx, dlabels, dloss, rows, vocab, -100, nullptr);
  check(cudaDeviceSynchronize(), "the kernel");
  const std::vector<float> grad = download(dx, x.size(), bf16), loss = download(dloss, rows, false);
  std::vector<int64_t> in_range = labels;
  if (rows > 3) in_range[3] = -100;
  const CrossEntropyExact e = cross_entropy_exact(x, in_range, rows, vocab, -100);
  const double b16 = bf16 ? 1.0 / 256 : 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    if (r == 3 && rows > 3) {
      expect(std::isnan(loss[r]), "ce out-of-range label", rows, vocab, bf16, r, loss[r], NAN);
      continue;
    }
    expect(std::abs(loss[r] - e.loss[r]) <= e.loss_bound[r] * kU, "ce loss", rows, vocab, bf16, r, loss[r], e.loss[r]);
    for (int64_t j = 0; j < vocab; ++j) {
      const size_t k = static_cast<size_t>(r * vocab + j);
      const double bound = e.grad_bound[k] * kU + b16 * std::abs(e.grad[k]) + kFloatMin;
      expect(std::abs(grad[k] - e.grad[k]) <= bound, "ce grad", rows, vocab, bf16, k, grad[k], e.grad[k]);
    }
  }
  for (void* p : {dx, static_cast<void*>(dlabels), static_cast<void*>(dloss)}) cudaFree(p);
}

}  // namespace

// AdamW's kernel against the host loop, bit for bit (the same fp32 operations, none contracted),
// `offset` elements into each array (1: not on 16 bytes, an element at a time).
void test_adamw(int64_t n, int64_t offset, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(n + offset), g(n + offset), m(n + offset), v(n + offset);
  for (int64_t i = 0; i < n + offset; ++i) {
    p[i] = normal(rng);
    g[i] = normal(rng) * 1e-2f;
    m[i] = normal(rng) * 1e-3f;
    v[i] = std::abs(normal(rng)) * 1e-5f;
  }
  const double lr = 3e-4, b1 = 0.9, b2 = 0.999, step = 7;
  const AdamWScalars s{static_cast<float>(1 - lr * 0.01), 0.9f, static_cast<float>(1 - b1), 0.999f,
                       static_cast<float>(1 - b2), static_cast<float>(std::sqrt(1 - std::pow(b2, step))), 1e-8f,
                       static_cast<float>(-lr / (1 - std::pow(b1, step))), 0.75f};
  float* d[4];
  std::vector<float>* host[4] = {&p, &g, &m, &v};
  for (int k = 0; k < 4; ++k) {
    check(cudaMalloc(&d[k], (n + offset) * 4), "cudaMalloc");
    check(cudaMemcpy(d[k], host[k]->data(), (n + offset) * 4, cudaMemcpyHostToDevice), "upload");
  }
  adamw_cuda(d[0] + offset, d[1] + offset, d[2] + offset, d[3] + offset, n, s, nullptr);
  check(cudaDeviceSynchronize(), "the kernel");
  adamw_update(p.data() + offset, g.data() + offset, m.data() + offset, v.data() + offset, n, s);
  const char* names[] = {"adamw parameter", "", "adamw first moment", "adamw second moment"};
  for (int k : {0, 2, 3}) {
    std::vector<float> got(n + offset);
    check(cudaMemcpy(got.data(), d[k], (n + offset) * 4, cudaMemcpyDeviceToHost), "download");
    for (int64_t i = 0; i < n + offset; ++i)
      expect(std::memcmp(&got[i], &(*host[k])[i], 4) == 0, names[k], n, offset, false, i, got[i], (*host[k])[i]);
  }
  for (float* a : d) cudaFree(a);
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU visible: skipped\n");
    return 77;
  }
  std::mt19937 rng(7);
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 17}, {33, 65}, {2, 1023}, {4, 4097}, {2, 16384}, {300, 2048}};
  for (const auto& s : shapes)
    for (float scale : {1e-3f, 1.0f, 300.0f})
      for (bool bf16 : {false, true}) test_rmsnorm(s[0], s[1], scale, bf16, rng);
  for (const auto& s : shapes)
    for (bool bf16 : {false, true}) test_rmsnorm_residual(s[0], s[1], bf16, rng);
  // The shapes marked "more than one grid's threads" take every kernel's grid-stride loop round; on
  // the CPU (tests/emu) the grid is made smaller, and so are they.
  const int64_t grid = kMaxGridBlocks * kGridThreads;
  for (int64_t count : {int64_t(1), int64_t(1000), int64_t(3) << 20})
    for (float scale : {1.0f, 60.0f})
      for (bool bf16 : {false, true}) test_swiglu(count, scale, bf16, rng);
  test_swiglu(grid + 333, 1.0f, false, rng);  // more elements than one grid's threads
  for (bool bf16 : {false, true}) test_swiglu_paths(4096, bf16, rng);
  // The last: more elements than one grid's threads.
  const int64_t joined_shapes[][2] = {{1, 1}, {3, 7}, {33, 65}, {2, 16384}, {grid / 8192 + 52, 8192}};
  for (const auto& s : joined_shapes)
    for (bool bf16 : {false, true}) test_swiglu_joined(s[0], s[1], bf16, rng);
  // Half a head of 6: a pair at a time; of 32 and 64, packs of 16 bytes; the last: more pairs than
  // one grid's threads.
  const int64_t rope_shapes[][3] = {
      {1, 1, 2}, {7, 5, 12}, {7, 5, 64}, {2048, 8, 64}, {grid / (33 * 64) + 8, 33, 128}};
  for (const auto& s : rope_shapes)
    for (bool bf16 : {false, true}) test_rope(s[0], s[1], s[2], bf16, rng);
  // Vocabularies of whole runs of 8 (packed loads) and not (1, 7, 1001: an element at a time).
  const int64_t ce_shapes[][2] = {{1, 1}, {3, 7}, {5, 1000}, {5, 1001}, {7, 32000}, {16, 128256}};
  for (const auto& s : ce_shapes)
    for (float scale : {1e-3f, 1.0f, 30.0f})
      for (bool bf16 : {false, true}) test_cross_entropy(s[0], s[1], scale, bf16, rng);
  // Whole packs of 4, a tail, not aligned; the last: more packs than one grid's threads.
  for (const int64_t n : {int64_t(1), int64_t(4096), int64_t(4099), (grid + 77) * 4 + 3})
    for (const int64_t offset : {int64_t(0), int64_t(1)}) test_adamw(n, offset, rng);
  for (const auto& [what, count] : failures_of) std::printf("%s: %d failure(s)\n", what.c_str(), count);
  std::printf("%s: %d failure(s)\n", failures == 0 ? "PASSED" : "FAILED", failures);
  return failures == 0 ? 0 : 1;
}
