// SwiGLU's CUDA kernels: elementwise, a grid-stride loop over the elements; the backward
// recomputes the sigmoid from g.
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
__global__ void forward_kernel(const T* g, const T* u, T* h, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    h[i] = from_float<T>(swiglu_value(to_float(g[i]), to_float(u[i])));
}

template <typename T>
__global__ void backward_kernel(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float a = 0, b = 0;
    swiglu_grads(to_float(g[i]), to_float(u[i]), to_float(dh[i]), &a, &b);
    dg[i] = from_float<T>(a);
    du[i] = from_float<T>(b);
  }
}

unsigned blocks_for(int64_t count) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (count + kThreads - 1) / kThreads));
}

template <typename T>
void forward(const void* g, const void* u, void* h, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  forward_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const T*>(g), static_cast<const T*>(u),
                                                                 static_cast<T*>(h), count);
  check_launch("swiglu forward");
}

template <typename T>
void backward(const void* g, const void* u, const void* dh, void* dg, void* du, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  backward_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const T*>(g), static_cast<const T*>(u),
                                                                  static_cast<const T*>(dh), static_cast<T*>(dg),
                                                                  static_cast<T*>(du), count);
  check_launch("swiglu backward");
}

}  // namespace

void swiglu_forward_cuda(Dtype dtype, const void* g, const void* u, void* h, int64_t count, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    forward<float>(g, u, h, count, s);
  } else {
    forward<__nv_bfloat16>(g, u, h, count, s);
  }
}

void swiglu_backward_cuda(Dtype dtype, const void* g, const void* u, const void* dh, void* dg, void* du, int64_t count,
                          void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    backward<float>(g, u, dh, dg, du, count, s);
  } else {
    backward<__nv_bfloat16>(g, u, dh, dg, du, count, s);
  }
}

}  // namespace shardtune::kernels
