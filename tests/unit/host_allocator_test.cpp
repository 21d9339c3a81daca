// Huge host blocks kept for reuse: common::LargeBlockCache's choices and bound, and the CPU tensor
// allocator that takes tensors of at least its threshold from it (runtime/train/host_allocator.h).
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <vector>

#include "common/large_block_cache.h"
#include "runtime/train/host_allocator.h"

namespace shardtune {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(LargeBlockCache, ReusesAKeptBlockOfAboutTheSizeAndMapsOtherwise) {
  common::LargeBlockCache cache(kMiB);
  void* a = cache.take(3 * kMiB);  // mapped as 4 MiB
  ASSERT_NE(a, nullptr);
  static_cast<char*>(a)[4 * kMiB - 1] = 1;  // the whole rounded size is there
  EXPECT_TRUE(cache.give_back(a));
  EXPECT_EQ(cache.stats().kept_bytes, 4 * kMiB);
  EXPECT_EQ(cache.take(4 * kMiB), a) << "the same size: the kept block";
  EXPECT_TRUE(cache.give_back(a));
  void* b = cache.take(2 * kMiB);  // 4 MiB is more than 1/8 above 2 MiB: a new mapping
  EXPECT_NE(b, a);
  void* c = cache.take(5 * kMiB);  // 6 MiB: the kept 4 MiB is too small
  EXPECT_NE(c, a);
  EXPECT_EQ(cache.stats().mappings, 3);
  EXPECT_EQ(cache.stats().live_bytes, 8 * kMiB);
  int local = 0;
  EXPECT_FALSE(cache.give_back(&local)) << "a pointer it did not give";
  EXPECT_FALSE(cache.give_back(a)) << "a kept block given back twice";
  EXPECT_TRUE(cache.give_back(b));
  EXPECT_EQ(cache.stats().kept_bytes, 6 * kMiB) << "a (4 MiB) and b (2 MiB)";
  EXPECT_TRUE(cache.give_back(c));
  EXPECT_EQ(cache.stats().live_bytes, 0u);
  EXPECT_EQ(cache.stats().kept_bytes, 6 * kMiB) << "a and b gone, the oldest first, for c: at most the largest block";
  cache.release_kept();
  EXPECT_EQ(cache.stats().kept_bytes, 0u);
}

TEST(LargeBlockCache, KeepsAtMostTheLargestBlockOldestGoingFirst) {
  common::LargeBlockCache cache(kMiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(cache.take(6 * kMiB));
  for (void* b : blocks) EXPECT_TRUE(cache.give_back(b));
  EXPECT_EQ(cache.stats().kept_bytes, 6 * kMiB) << "one of the five 6 MiB blocks";
  // The newest is kept: taking one gives it, the next is a new mapping.
  const int64_t mapped = cache.stats().mappings;
  EXPECT_EQ(cache.take(6 * kMiB), blocks[4]);
  EXPECT_EQ(cache.stats().mappings, mapped);
  cache.take(6 * kMiB);
  EXPECT_EQ(cache.stats().mappings, mapped + 1);
}

TEST(HostAllocator, TensorsOfTheThresholdComeFromTheCacheOthersFromLibTorch) {
  common::LargeBlockCache& cache = train::use_large_block_cache(4 * kMiB);
  EXPECT_EQ(&train::use_large_block_cache(), &cache) << "installed once";
  void* first = nullptr;
  {
    at::Tensor big = at::empty({int64_t{1} << 20}, at::kFloat);  // 4 MiB
    big.fill_(2.0f);
    EXPECT_EQ(big.sum().item<double>(), 2.0 * (1 << 20));
    first = big.data_ptr();
    EXPECT_EQ(cache.stats().live_bytes, 4 * kMiB);
  }
  EXPECT_EQ(cache.stats().live_bytes, 0u);
  EXPECT_EQ(cache.stats().kept_bytes, 4 * kMiB);
  at::Tensor again = at::empty({int64_t{1} << 20}, at::kFloat);
  EXPECT_EQ(again.data_ptr(), first) << "the step's next tensor of that size reuses the block";
  const auto before = cache.stats();
  at::Tensor small = at::empty({1024}, at::kFloat);
  EXPECT_EQ(cache.stats().live_bytes, before.live_bytes);
  EXPECT_EQ(cache.stats().mappings, before.mappings);
  // raw_allocate / raw_deallocate (as some LibTorch kernels use the CPU allocator), large and small.
  c10::Allocator* cpu = c10::GetCPUAllocator();
  void* raw_big = cpu->raw_allocate(8 * kMiB);
  void* raw_small = cpu->raw_allocate(64);
  EXPECT_EQ(cache.stats().live_bytes, before.live_bytes + 8 * kMiB);
  cpu->raw_deallocate(raw_big);
  cpu->raw_deallocate(raw_small);
  EXPECT_EQ(cache.stats().live_bytes, before.live_bytes);
  train::release_kept_large_blocks();
  EXPECT_EQ(cache.stats().kept_bytes, 0u);
}

}  // namespace
}  // namespace shardtune
