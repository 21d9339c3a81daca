// Rotary position embedding's CUDA kernel: a grid-stride loop over the (position, head, pair)
// triples; each thread reads both elements of its pair before writing either, so the rotation
// may be done in place.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/kernels/device_util.cuh"
#include "runtime/kernels/rope_cuda.h"
#include "runtime/kernels/rope_math.h"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// I: the index type, 32-bit unsigned where every offset fits (a 64-bit division per pair costs
// more than the pair's memory traffic on a GPU), else int64_t.
template <typename T, typename I>
__global__ void rope_kernel(const T* x, const T* cos, const T* sin, T* out, I heads, I half, I pairs, bool backward) {
  for (I k = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; k < pairs; k += static_cast<I>(gridDim.x) * kThreads) {
    const I row = k / half, i = k - row * half, position = row / heads;
    const I a = row * 2 * half + i, b = a + half;
    const I ta = position * 2 * half + i, tb = ta + half;
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
  const auto* xp = static_cast<const T*>(x);
  const auto* cp = static_cast<const T*>(cos);
  const auto* sp = static_cast<const T*>(sin);
  auto* op = static_cast<T*>(out);
  // The largest offset is 2 pairs; the loop steps at most one grid past the end.
  if (2 * pairs + kMaxBlocks * kThreads < (int64_t{1} << 32)) {
    rope_kernel<T, uint32_t><<<blocks, kThreads, 0, stream>>>(xp, cp, sp, op, static_cast<uint32_t>(heads),
                                                             static_cast<uint32_t>(half),
                                                             static_cast<uint32_t>(pairs), backward);
  } else {
    rope_kernel<T, int64_t><<<blocks, kThreads, 0, stream>>>(xp, cp, sp, op, heads, half, pairs, backward);
  }
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
