// SwiGLU's CUDA kernels: elementwise, a grid-stride loop over the elements of (rows, cols); the
// backward recomputes the sigmoid from g.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/kernels/device_util.cuh"
#include "runtime/kernels/swiglu_cuda.h"
#include "runtime/kernels/swiglu_math.h"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <typename T>
__global__ void forward_kernel(const T* g, const T* u, int64_t in_stride, T* h, int64_t cols, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t in = swiglu_offset(i, cols, in_stride);
    h[i] = from_float<T>(swiglu_value(to_float(g[in]), to_float(u[in])));
  }
}

template <typename T>
__global__ void backward_kernel(const T* g, const T* u, int64_t in_stride, const T* dh, T* dg, T* du,
                                int64_t out_stride, int64_t cols, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t in = swiglu_offset(i, cols, in_stride), out = swiglu_offset(i, cols, out_stride);
    float a = 0, b = 0;
    swiglu_grads(to_float(g[in]), to_float(u[in]), to_float(dh[i]), &a, &b);
    dg[out] = from_float<T>(a);
    du[out] = from_float<T>(b);
  }
}

unsigned blocks_for(int64_t count) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (count + kThreads - 1) / kThreads));
}

template <typename T>
void forward(const SwigluLayout& l, const void* g, const void* u, void* h, cudaStream_t stream) {
  const int64_t count = l.rows * l.cols;
  if (count == 0) return;
  forward_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const T*>(g), static_cast<const T*>(u),
                                                                 l.in_stride, static_cast<T*>(h), l.cols, count);
  check_launch("swiglu forward");
}

template <typename T>
void backward(const SwigluLayout& l, const void* g, const void* u, const void* dh, void* dg, void* du,
              cudaStream_t stream) {
  const int64_t count = l.rows * l.cols;
  if (count == 0) return;
  backward_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(
      static_cast<const T*>(g), static_cast<const T*>(u), l.in_stride, static_cast<const T*>(dh), static_cast<T*>(dg),
      static_cast<T*>(du), l.out_stride, l.cols, count);
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
