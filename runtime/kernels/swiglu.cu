// SwiGLU's CUDA kernels: elementwise, a grid-stride loop over the elements of (rows, cols), or over
// their packs of 16 bytes where the layout allows; the backward recomputes the sigmoid from g.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "runtime/kernels/device_util.cuh"
#include "runtime/kernels/swiglu_cuda.h"
#include "runtime/kernels/swiglu_math.h"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = kGridThreads;

// I: the index type, 32-bit unsigned where every offset fits (a 64-bit division per element costs
// more than the element's memory traffic on a GPU), else int64_t.
template <typename T, typename I>
__global__ void forward_kernel(const T* g, const T* u, I in_stride, T* h, I cols, I count) {
  for (I i = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; i < count; i += static_cast<I>(gridDim.x) * kThreads) {
    const I in = swiglu_offset(i, cols, in_stride);
    h[i] = from_float<T>(swiglu_value(to_float(g[in]), to_float(u[in])));
  }
}

template <typename T, typename I>
__global__ void backward_kernel(const T* g, const T* u, I in_stride, const T* dh, T* dg, T* du, I out_stride, I cols,
                                I count) {
  for (I i = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; i < count; i += static_cast<I>(gridDim.x) * kThreads) {
    const I in = swiglu_offset(i, cols, in_stride), out = swiglu_offset(i, cols, out_stride);
    float a = 0, b = 0;
    swiglu_grads(to_float(g[in]), to_float(u[in]), to_float(dh[i]), &a, &b);
    dg[out] = from_float<T>(a);
    du[out] = from_float<T>(b);
  }
}

// The same arithmetic a pack (16 bytes) at a time, where the columns and the strides are whole
// packs and every array starts on 16 bytes: a pack then never crosses a row. Sizes in packs.
template <typename T, typename I>
__global__ void forward_packed(const T* g, const T* u, I in_stride, T* h, I cols, I packs) {
  constexpr int n = Pack<T>::kSize;
  const I step = static_cast<I>(gridDim.x) * kThreads;
  for (I p = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; p < packs; p += step) {
    const I in = swiglu_offset(p, cols, in_stride) * n;
    const Pack<T> a = load_pack(g + in), b = load_pack(u + in);
    Pack<T> o;
#pragma unroll
    for (int k = 0; k < n; ++k) o.v[k] = from_float<T>(swiglu_value(to_float(a.v[k]), to_float(b.v[k])));
    store_pack(h + p * n, o);
  }
}

template <typename T, typename I>
__global__ void backward_packed(const T* g, const T* u, I in_stride, const T* dh, T* dg, T* du, I out_stride, I cols,
                                I packs) {
  constexpr int n = Pack<T>::kSize;
  const I step = static_cast<I>(gridDim.x) * kThreads;
  for (I p = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; p < packs; p += step) {
    const I in = swiglu_offset(p, cols, in_stride) * n, out = swiglu_offset(p, cols, out_stride) * n;
    const Pack<T> a = load_pack(g + in), b = load_pack(u + in), d = load_pack(dh + p * n);
    Pack<T> og, ou;
#pragma unroll
    for (int k = 0; k < n; ++k) {
      float x = 0, y = 0;
      swiglu_grads(to_float(a.v[k]), to_float(b.v[k]), to_float(d.v[k]), &x, &y);
      og.v[k] = from_float<T>(x);
      ou.v[k] = from_float<T>(y);
    }
    store_pack(dg + out, og);
    store_pack(du + out, ou);
  }
}

// Every offset the kernels form (and the loop's last step past the end) fits 32 bits.
bool fits_32_bits(const SwigluLayout& l) {
  const int64_t widest = std::max({l.cols, l.in_stride, l.out_stride});
  return l.rows * widest + kMaxGridBlocks * kThreads < (int64_t{1} << 32);
}

// Whether the packed kernels apply: whole packs in every row and stride, every array on 16 bytes.
template <typename T>
bool packable(const SwigluLayout& l, std::initializer_list<const void*> arrays) {
  constexpr int64_t n = Pack<T>::kSize;
  if (l.cols % n != 0 || l.in_stride % n != 0 || l.out_stride % n != 0) return false;
  return std::all_of(arrays.begin(), arrays.end(), aligned_16);
}

template <typename T, typename I>
void launch_forward(const SwigluLayout& l, const T* g, const T* u, T* h, cudaStream_t stream) {
  const auto count = static_cast<I>(l.rows * l.cols);
  if (packable<T>(l, {g, u, h})) {
    constexpr I n = Pack<T>::kSize;
    forward_packed<T, I><<<grid_blocks(count / n), kThreads, 0, stream>>>(
        g, u, static_cast<I>(l.in_stride) / n, h, static_cast<I>(l.cols) / n, count / n);
  } else {
    forward_kernel<T, I><<<grid_blocks(count), kThreads, 0, stream>>>(g, u, static_cast<I>(l.in_stride), h,
                                                                       static_cast<I>(l.cols), count);
  }
}

template <typename T, typename I>
void launch_backward(const SwigluLayout& l, const T* g, const T* u, const T* dh, T* dg, T* du, cudaStream_t stream) {
  const auto count = static_cast<I>(l.rows * l.cols);
  const auto in_stride = static_cast<I>(l.in_stride), out_stride = static_cast<I>(l.out_stride);
  const auto cols = static_cast<I>(l.cols);
  if (packable<T>(l, {g, u, dh, dg, du})) {
    constexpr I n = Pack<T>::kSize;
    backward_packed<T, I><<<grid_blocks(count / n), kThreads, 0, stream>>>(g, u, in_stride / n, dh, dg, du,
                                                                            out_stride / n, cols / n, count / n);
  } else {
    backward_kernel<T, I><<<grid_blocks(count), kThreads, 0, stream>>>(g, u, in_stride, dh, dg, du, out_stride, cols,
                                                                        count);
  }
}

template <typename T>
void forward(const SwigluLayout& l, const void* g, const void* u, void* h, cudaStream_t stream) {
  if (l.rows * l.cols == 0) return;
  const auto* gp = static_cast<const T*>(g);
  const auto* up = static_cast<const T*>(u);
  auto* hp = static_cast<T*>(h);
  if (fits_32_bits(l)) {
    launch_forward<T, uint32_t>(l, gp, up, hp, stream);
  } else {
    launch_forward<T, int64_t>(l, gp, up, hp, stream);
  }
  check_launch("swiglu forward");
}

template <typename T>
void backward(const SwigluLayout& l, const void* g, const void* u, const void* dh, void* dg, void* du,
              cudaStream_t stream) {
  if (l.rows * l.cols == 0) return;
  const auto* gp = static_cast<const T*>(g);
  const auto* up = static_cast<const T*>(u);
  const auto* dhp = static_cast<const T*>(dh);
  auto* dgp = static_cast<T*>(dg);
  auto* dup = static_cast<T*>(du);
  if (fits_32_bits(l)) {
    launch_backward<T, uint32_t>(l, gp, up, dhp, dgp, dup, stream);
  } else {
    launch_backward<T, int64_t>(l, gp, up, dhp, dgp, dup, stream);
  }
  check_launch("swiglu backward");
}

}  // namespace

void swiglu_forward_cuda(Dtype dtype, const SwigluLayout& layout, const void* g, const void* u, void* h, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    forward<float>(layout, g, u, h, s);
  } else {
    forward<__nv_bfloat16>(layout, g, u, h, s);
  }
}

void swiglu_backward_cuda(Dtype dtype, const SwigluLayout& layout, const void* g, const void* u, const void* dh,
                          void* dg, void* du, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    backward<float>(layout, g, u, dh, dg, du, s);
  } else {
    backward<__nv_bfloat16>(layout, g, u, dh, dg, du, s);
  }
}

}  // namespace shardtune::kernels
