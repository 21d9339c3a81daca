// What the kernels' .cu files share: loads and stores of fp32 or bf16 as fp32, and launch checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace shardtune::kernels {

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// A pack: the elements of T in 16 bytes (8 bf16, 4 fp32), loaded and stored as one access, which
// a memory-bound kernel needs to come near the GPU's bandwidth (one 2-byte access a thread does not).
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
  T v[kSize];
};
template <typename T>
__device__ inline Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T>
__device__ inline void store_pack(T* p, const Pack<T>& pack) {
  *reinterpret_cast<Pack<T>*>(p) = pack;
}

// A grid-stride loop's launch: kGridThreads threads a block, at most kMaxGridBlocks blocks; the
// loop takes what one grid's threads do not. The kernels' test on the CPU (tests/emu) makes the grid
// smaller, so that the loops go round at sizes it can afford.
#ifndef ST_KERNELS_MAX_GRID_BLOCKS
#define ST_KERNELS_MAX_GRID_BLOCKS 65535
#endif
constexpr int kGridThreads = 256;
constexpr int64_t kMaxGridBlocks = ST_KERNELS_MAX_GRID_BLOCKS;
inline unsigned grid_blocks(int64_t work) {
  return static_cast<unsigned>(std::min(kMaxGridBlocks, (work + kGridThreads - 1) / kGridThreads));
}

// Whether an array starts on 16 bytes, as a pack's access needs.
inline bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Throws naming `what` when the last launch failed.
inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace shardtune::kernels
