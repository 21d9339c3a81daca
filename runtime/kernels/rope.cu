// Rotary position embedding's CUDA kernel: a grid-stride loop over the (position, head, pair)
// triples, or over packs of 16 bytes of them where the layout allows; each thread reads both
// elements of its pairs before writing either, so the rotation may be done in place.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/kernels/device_util.cuh"
#include "runtime/kernels/rope_cuda.h"
#include "runtime/kernels/rope_math.h"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = kGridThreads;

// I: the index type, 32-bit unsigned where every offset fits (a 64-bit division per pair costs
// more than the pair's memory traffic on a GPU), else int64_t.
template <typename T, typename I>
__global__ void rope_kernel(const T* x, const T* cos, const T* sin, T* out, I heads, I half, I x_stride, I out_stride,
                            I pairs, bool backward) {
  for (I k = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; k < pairs; k += static_cast<I>(gridDim.x) * kThreads) {
    const RopeOffsets<I> o = rope_offsets(k, heads, half, x_stride, out_stride);
    const I ta = o.t, tb = o.t + half;
    const float x1 = to_float(x[o.x]), x2 = to_float(x[o.x + half]);
    float o1 = 0, o2 = 0;
    if (backward) {
      rope_pair_grad(x1, x2, to_float(cos[ta]), to_float(sin[ta]), to_float(cos[tb]), to_float(sin[tb]), &o1, &o2);
    } else {
      rope_pair(x1, x2, to_float(cos[ta]), to_float(sin[ta]), to_float(cos[tb]), to_float(sin[tb]), &o1, &o2);
    }
    out[o.out] = from_float<T>(o1);
    out[o.out + half] = from_float<T>(o2);
  }
}

// The same a pack (16 bytes) of pairs' first and second elements at a time, where half a head and
// the strides are whole packs and every array starts on 16 bytes. Sizes in packs.
template <typename T, typename I>
__global__ void rope_packed(const T* x, const T* cos, const T* sin, T* out, I heads, I half, I x_stride, I out_stride,
                            I packs, bool backward) {
  constexpr int n = Pack<T>::kSize;
  const I step = static_cast<I>(gridDim.x) * kThreads;
  for (I k = blockIdx.x * static_cast<I>(kThreads) + threadIdx.x; k < packs; k += step) {
    const RopeOffsets<I> o = rope_offsets(k, heads, half, x_stride, out_stride);
    const I xa = o.x * n, xb = (o.x + half) * n, oa = o.out * n, ob = (o.out + half) * n;
    const I ta = o.t * n, tb = (o.t + half) * n;
    const Pack<T> x1 = load_pack(x + xa), x2 = load_pack(x + xb);
    const Pack<T> c1 = load_pack(cos + ta), s1 = load_pack(sin + ta);
    const Pack<T> c2 = load_pack(cos + tb), s2 = load_pack(sin + tb);
    Pack<T> o1, o2;
#pragma unroll
    for (int e = 0; e < n; ++e) {
      float r1 = 0, r2 = 0;
      const float v1 = to_float(x1.v[e]), v2 = to_float(x2.v[e]);
      if (backward) {
        rope_pair_grad(v1, v2, to_float(c1.v[e]), to_float(s1.v[e]), to_float(c2.v[e]), to_float(s2.v[e]), &r1, &r2);
      } else {
        rope_pair(v1, v2, to_float(c1.v[e]), to_float(s1.v[e]), to_float(c2.v[e]), to_float(s2.v[e]), &r1, &r2);
      }
      o1.v[e] = from_float<T>(r1);
      o2.v[e] = from_float<T>(r2);
    }
    store_pack(out + oa, o1);
    store_pack(out + ob, o2);
  }
}

template <typename T, typename I>
void launch(const T* x, const T* cos, const T* sin, T* out, I heads, I half, I x_stride, I out_stride, I pairs,
            bool backward, cudaStream_t stream) {
  constexpr I n = Pack<T>::kSize;
  const bool packed = half % n == 0 && x_stride % n == 0 && out_stride % n == 0 && aligned_16(x) && aligned_16(cos) &&
                      aligned_16(sin) && aligned_16(out);
  const I work = packed ? pairs / n : pairs;
  const unsigned blocks = grid_blocks(static_cast<int64_t>(work));
  if (packed) {
    rope_packed<T, I><<<blocks, kThreads, 0, stream>>>(x, cos, sin, out, heads, half / n, x_stride / n,
                                                       out_stride / n, work, backward);
  } else {
    rope_kernel<T, I><<<blocks, kThreads, 0, stream>>>(x, cos, sin, out, heads, half, x_stride, out_stride, work,
                                                       backward);
  }
}

template <typename T>
void rope(const void* x, const void* cos, const void* sin, void* out, int64_t positions, int64_t heads,
          int64_t head_dim, int64_t x_stride, int64_t out_stride, bool backward, cudaStream_t stream) {
  const int64_t half = head_dim / 2, pairs = positions * heads * half;
  if (pairs == 0) return;
  const auto* xp = static_cast<const T*>(x);
  const auto* cp = static_cast<const T*>(cos);
  const auto* sp = static_cast<const T*>(sin);
  auto* op = static_cast<T*>(out);
  // The largest offset is below a position's stride times the positions; the loop steps at most one
  // grid past the end.
  const int64_t largest = std::max({x_stride, out_stride, heads * head_dim}) * positions;
  if (largest + kMaxGridBlocks * kThreads < (int64_t{1} << 32)) {
    launch<T, uint32_t>(xp, cp, sp, op, static_cast<uint32_t>(heads), static_cast<uint32_t>(half),
                        static_cast<uint32_t>(x_stride), static_cast<uint32_t>(out_stride),
                        static_cast<uint32_t>(pairs), backward, stream);
  } else {
    launch<T, int64_t>(xp, cp, sp, op, heads, half, x_stride, out_stride, pairs, backward, stream);
  }
  check_launch(backward ? "rope backward" : "rope forward");
}

}  // namespace

void rope_cuda(Dtype dtype, const void* x, const void* cos, const void* sin, void* out, int64_t positions,
               int64_t heads, int64_t head_dim, int64_t x_stride, int64_t out_stride, bool backward, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    rope<float>(x, cos, sin, out, positions, heads, head_dim, x_stride, out_stride, backward, s);
  } else {
    rope<__nv_bfloat16>(x, cos, sin, out, positions, heads, head_dim, x_stride, out_stride, backward, s);
  }
}

}  // namespace shardtune::kernels
