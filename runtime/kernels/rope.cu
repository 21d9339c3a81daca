// Rotary position embedding's CUDA kernel: a grid-stride loop over the (position, head, pair)
// triples; each thread reads both elements of its pair before writing either, so the rotation
// may be done in place.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/kernels/device_util.cuh"
#include "runtime/kernels/rope_cuda.h"
#include "runtime/kernels/rope_math.h"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <typename T>
__global__ void rope_kernel(const T* x, const T* cos, const T* sin, T* out, int64_t heads, int64_t half, int64_t pairs,
                            bool backward) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; k < pairs;
       k += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t i = k % half, row = k / half, position = row / heads;
    const int64_t a = row * 2 * half + i, b = a + half;
    const int64_t ta = position * 2 * half + i, tb = ta + half;
    const float x1 = to_float(x[a]), x2 = to_float(x[b]);
    float o1 = 0, o2 = 0;
    if (backward) {
      rope_pair_grad(x1, x2, to_float(cos[ta]), to_float(sin[ta]), to_float(cos[tb]), to_float(sin[tb]), &o1, &o2);
    } else {
      rope_pair(x1, x2, to_float(cos[ta]), to_float(sin[ta]), to_float(cos[tb]), to_float(sin[tb]), &o1, &o2);
    }
    out[a] = from_float<T>(o1);
    out[b] = from_float<T>(o2);
  }
}

template <typename T>
void rope(const void* x, const void* cos, const void* sin, void* out, int64_t positions, int64_t heads,
          int64_t head_dim, bool backward, cudaStream_t stream) {
  const int64_t half = head_dim / 2, pairs = positions * heads * half;
  if (pairs == 0) return;
  const auto blocks = static_cast<unsigned>(std::min(kMaxBlocks, (pairs + kThreads - 1) / kThreads));
  rope_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(cos),
                                                  static_cast<const T*>(sin), static_cast<T*>(out), heads, half, pairs,
                                                  backward);
  check_launch(backward ? "rope backward" : "rope forward");
}

}  // namespace

void rope_cuda(Dtype dtype, const void* x, const void* cos, const void* sin, void* out, int64_t positions,
               int64_t heads, int64_t head_dim, bool backward, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    rope<float>(x, cos, sin, out, positions, heads, head_dim, backward, s);
  } else {
    rope<__nv_bfloat16>(x, cos, sin, out, positions, heads, head_dim, backward, s);
  }
}

}  // namespace shardtune::kernels
