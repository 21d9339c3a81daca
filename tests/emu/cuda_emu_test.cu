// The CPU's CUDA (cuda_emu.h) against what CUDA specifies: every thread of a grid runs once with
// its indices; a shuffle returns its partner lane's value; a barrier orders the block's threads'
// writes before their reads; and what CUDA leaves undefined or rejects stops the program (or fails
// the launch) naming it. Its launches go through unchevron.py like the kernels'.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

constexpr int kThreads = 128;

__global__ void record_indices(uint32_t* seen, int64_t width) {
  const int64_t block = blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
  const int64_t thread = threadIdx.x + static_cast<int64_t>(blockDim.x) * (threadIdx.y + blockDim.y * threadIdx.z);
  seen[block * width + thread] += 1;
}

TEST(CudaEmu, EveryThreadOfAGridRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const int64_t blocks = 12, width = 24;
  std::vector<uint32_t> seen(blocks * width, 0);
  record_indices<<<grid, block>>>(seen.data(), width);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1u) << "thread " << i;
}

// The order the blocks run in (no atomics needed: the emulation runs one thread at a time).
__global__ void record_block_order(uint32_t* order, uint32_t* next) {
  if (threadIdx.x == 0) order[blockIdx.x + gridDim.x * blockIdx.y] = (*next)++;
}

// Each thread marks itself, then reads the mark of the thread before it, with no barrier between.
__global__ void read_the_previous_mark(uint32_t* marks, uint32_t* seen) {
  marks[threadIdx.x] = 1;
  seen[threadIdx.x] = threadIdx.x > 0 ? marks[threadIdx.x - 1] : 1;
}

// CUDA promises no order of blocks, nor of a block's threads between barriers: the emulation runs
// them in orders that expose a kernel relying on one.
TEST(CudaEmu, BlocksAndThreadsRunInNoOrderAKernelMayRelyOn) {
  for (const dim3 grid : {dim3(2), dim3(7, 3), dim3(64), dim3(40503, 1)}) {
    const uint32_t count = grid.x * grid.y;
    std::vector<uint32_t> order(count, ~0u);
    uint32_t next = 0;
    record_block_order<<<grid, 32>>>(order.data(), &next);
    std::vector<bool> ran(count, false);
    bool ascending = true;
    for (uint32_t b = 0; b < count; ++b) {
      ASSERT_LT(order[b], count) << "block " << b;
      EXPECT_FALSE(ran[order[b]]) << "two blocks ran " << order[b] << "-th";
      ran[order[b]] = true;
      ascending = ascending && order[b] == b;
    }
    EXPECT_FALSE(ascending) << grid.x << " x " << grid.y << " blocks ran in order";
  }
  std::vector<uint32_t> marks(kThreads, 0), seen(kThreads, 0);
  read_the_previous_mark<<<1, kThreads>>>(marks.data(), seen.data());
  // (Thread 0 runs first: it tells whether the block needs fibers.)
  for (int t = 2; t < kThreads; ++t) EXPECT_EQ(seen[t], 0u) << "thread " << t << " saw its predecessor's mark";
}

// Each lane's value after a butterfly of shuffles: the sum over its warp, the same in every lane.
__global__ void warp_sums(const float* in, float* out) {
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

TEST(CudaEmu, ShufflesExchangeWithinEachWarp) {
  const int blocks = 3;
  std::vector<float> in(blocks * kThreads), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97);  // sums exact in fp32
  warp_sums<<<blocks, kThreads>>>(in.data(), out.data());
  for (size_t w = 0; w < in.size(); w += 32) {
    float sum = 0;
    for (size_t i = w; i < w + 32; ++i) sum += in[i];
    for (size_t i = w; i < w + 32; ++i) EXPECT_EQ(out[i], sum) << "lane " << i;
  }
}

// Each thread writes its slot, and after the barrier reads the slot of the thread opposite: the
// barrier must hold every write before any read, whichever thread runs first.
__global__ void reverse_through_shared(const float* in, float* out) {
  __shared__ float slots[kThreads];
  slots[threadIdx.x] = in[blockIdx.x * kThreads + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * kThreads + threadIdx.x] = slots[kThreads - 1 - threadIdx.x];
}

TEST(CudaEmu, ABarrierOrdersTheBlocksWritesBeforeItsReads) {
  const int blocks = 4;
  std::vector<float> in(blocks * kThreads), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  reverse_through_shared<<<blocks, kThreads>>>(in.data(), out.data());
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(out[b * kThreads + t], in[b * kThreads + kThreads - 1 - t]);
}

__global__ void barrier_in_half_the_block(float* out) {
  if (threadIdx.x < kThreads / 2) __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void barrier_past_thread_0(float* out) {
  if (threadIdx.x > 0) __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffle_in_half_a_warp(float* out) {
  float v = 1;
  if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

TEST(CudaEmuDeathTest, UndefinedSynchronisationStopsTheProgramNamingIt) {
  std::vector<float> out(kThreads);
  EXPECT_DEATH(barrier_in_half_the_block<<<1, kThreads>>>(out.data()), "__syncthreads that not every thread");
  EXPECT_DEATH(barrier_past_thread_0<<<1, kThreads>>>(out.data()), "__syncthreads that thread 0 of the block never");
  EXPECT_DEATH(shuffle_in_half_a_warp<<<1, kThreads>>>(out.data()), "shuffle that not every lane of the warp");
  EXPECT_DEATH(barrier_in_half_the_block<<<1, kThreads>>>(out.data()), "cuda_emu_test.cu:[0-9]+ barrier_in_half");
}

TEST(CudaEmu, ALaunchCudaRejectsRunsNothingAndIsTheLastError) {
  std::vector<uint32_t> seen(2048, 0);
  record_indices<<<dim3(0), dim3(32)>>>(seen.data(), 32);
  EXPECT_NE(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, as CUDA's
  record_indices<<<dim3(1), dim3(2048)>>>(seen.data(), 2048);
  EXPECT_NE(cudaGetLastError(), cudaSuccess);
  record_indices<<<dim3(1, 65536), dim3(1)>>>(seen.data(), 1);
  EXPECT_NE(cudaGetLastError(), cudaSuccess);
  for (uint32_t s : seen) EXPECT_EQ(s, 0u);
}

}  // namespace
