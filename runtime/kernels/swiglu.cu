// SwiGLU's CUDA kernels: elementwise, a grid-stride loop over the elements of (rows, cols); the
// backward recomputes the sigmoid from g.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/kernels/device_util.cuh"
#include "runtime/kernels/swiglu_cuda.h"
#include "runtime/kernels/swiglu_math.h"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

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

unsigned blocks_for(int64_t count) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (count + kThreads - 1) / kThreads));
}

// Every offset the kernels form (and the loop's last step past the end) fits 32 bits.
bool fits_32_bits(const SwigluLayout& l) {
  const int64_t widest = std::max({l.cols, l.in_stride, l.out_stride});
  return l.rows * widest + kMaxBlocks * kThreads < (int64_t{1} << 32);
}

template <typename T>
void forward(const SwigluLayout& l, const void* g, const void* u, void* h, cudaStream_t stream) {
  const int64_t count = l.rows * l.cols;
  if (count == 0) return;
  const auto* gp = static_cast<const T*>(g);
  const auto* up = static_cast<const T*>(u);
  auto* hp = static_cast<T*>(h);
  if (fits_32_bits(l)) {
    forward_kernel<T, uint32_t><<<blocks_for(count), kThreads, 0, stream>>>(
        gp, up, static_cast<uint32_t>(l.in_stride), hp, static_cast<uint32_t>(l.cols), static_cast<uint32_t>(count));
  } else {
    forward_kernel<T, int64_t><<<blocks_for(count), kThreads, 0, stream>>>(gp, up, l.in_stride, hp, l.cols, count);
  }
  check_launch("swiglu forward");
}

template <typename T>
void backward(const SwigluLayout& l, const void* g, const void* u, const void* dh, void* dg, void* du,
              cudaStream_t stream) {
  const int64_t count = l.rows * l.cols;
  if (count == 0) return;
  const auto* gp = static_cast<const T*>(g);
  const auto* up = static_cast<const T*>(u);
  const auto* dhp = static_cast<const T*>(dh);
  auto* dgp = static_cast<T*>(dg);
  auto* dup = static_cast<T*>(du);
  if (fits_32_bits(l)) {
    backward_kernel<T, uint32_t><<<blocks_for(count), kThreads, 0, stream>>>(
        gp, up, static_cast<uint32_t>(l.in_stride), dhp, dgp, dup, static_cast<uint32_t>(l.out_stride),
        static_cast<uint32_t>(l.cols), static_cast<uint32_t>(count));
  } else {
    backward_kernel<T, int64_t><<<blocks_for(count), kThreads, 0, stream>>>(gp, up, l.in_stride, dhp, dgp, dup,
                                                                            l.out_stride, l.cols, count);
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
