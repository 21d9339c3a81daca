// CUDA on the CPU, for tests: the part of CUDA that shardtune's kernels (runtime/kernels/*.cu) use,
// so that their own code, compiled by the host compiler, runs against their host references and
// under AddressSanitizer on a machine without a GPU. A launch (written `cuda_emu::launch` by
// unchevron.py) runs its blocks one after another; a block's threads are fibers that run in turn
// until each reaches a barrier (__syncthreads, for the block) or a shuffle (for its warp), which
// all of them must reach, or the kernel's end. A block whose thread 0 reaches no barrier or
// shuffle runs its other threads one after another without fibers. What the scheduler finds is
// what CUDA leaves undefined or hangs on, and it stops the program naming it: a barrier that not
// every thread of the block reaches, a full-mask shuffle that not every lane of the warp reaches,
// a launch configuration CUDA rejects.
#pragma once

#include <cstddef>
#include <cstdint>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static  // one block at a time: a function's shared array is the block's

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace cuda_emu {

const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

void sync_threads();
float shfl_xor(unsigned mask, float v, int lane_mask);

// Runs body(), the kernel's call with its arguments, once for every thread of the grid.
void run(const dim3& grid, const dim3& block, void (*body)(void*), void* arg, const char* where);

template <typename F>
void launch(const char* where, F&& body, const dim3& grid, const dim3& block, size_t = 0, cudaStream_t = nullptr) {
  run(grid, block, [](void* f) { (*static_cast<F*>(f))(); }, &body, where);
}

}  // namespace cuda_emu

#define threadIdx (::cuda_emu::thread_idx())
#define blockIdx (::cuda_emu::block_idx())
#define blockDim (::cuda_emu::block_dim())
#define gridDim (::cuda_emu::grid_dim())

inline void __syncthreads() { ::cuda_emu::sync_threads(); }
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) { return ::cuda_emu::shfl_xor(mask, v, lane_mask); }
