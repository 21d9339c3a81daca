// AdamW's CUDA kernel: a grid-stride loop over the elements, or over packs of 4 (16 bytes of each
// array) where every array starts on 16 bytes. Built with -fmad=false (CMakeLists.txt): no
// multiply and add is contracted, as on the host, and CUDA's sqrtf and division are IEEE-rounded,
// so each element's result is the host loop's, bit for bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernels/adamw_cuda.h"
#include "runtime/kernels/device_util.cuh"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = kGridThreads;

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamWScalars s) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n; i += step)
    adamw_element(p[i], g[i], m[i], v[i], s);
}

__global__ void adamw_packed(float* p, const float* g, float* m, float* v, int64_t packs, AdamWScalars s) {
  constexpr int n = Pack<float>::kSize;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; k < packs; k += step) {
    Pack<float> pp = load_pack(p + k * n), mp = load_pack(m + k * n), vp = load_pack(v + k * n);
    const Pack<float> gp = load_pack(g + k * n);
#pragma unroll
    for (int e = 0; e < n; ++e) adamw_element(pp.v[e], gp.v[e], mp.v[e], vp.v[e], s);
    store_pack(p + k * n, pp);
    store_pack(m + k * n, mp);
    store_pack(v + k * n, vp);
  }
}

}  // namespace

void adamw_cuda(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s, void* stream) {
  if (n == 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  constexpr int64_t pack = Pack<float>::kSize;
  const int64_t whole = aligned_16(p) && aligned_16(g) && aligned_16(m) && aligned_16(v) ? n / pack * pack : 0;
  if (whole > 0) adamw_packed<<<grid_blocks(whole / pack), kThreads, 0, st>>>(p, g, m, v, whole / pack, s);
  if (whole < n)  // the tail past the last whole pack, or everything where an array is not aligned
    adamw_kernel<<<grid_blocks(n - whole), kThreads, 0, st>>>(p + whole, g + whole, m + whole, v + whole, n - whole, s);
  check_launch("adamw");
}

}  // namespace shardtune::kernels
