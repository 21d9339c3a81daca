// CPU tensors of a training process: huge ones from a LargeBlockCache (host_allocator.h).
#include "runtime/train/host_allocator.h"

#include <c10/core/CPUAllocator.h>

#include "runtime/train/allocator_compat.h"

namespace shardtune::train {
namespace {

class HostAllocator final : public c10::Allocator {
 public:
  HostAllocator(c10::Allocator* base, size_t threshold) : base_(base), cache_(threshold) {}

  c10::DataPtr allocate(size_t n) ST_ALLOCATE_CONST override {
    if (n < cache_.threshold()) return base_->allocate(n);
    void* block = cache_.take(n);
    return {block, block, &release, c10::Device(c10::kCPU)};  // context = data, as raw_allocate asks
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
#if ST_ALLOCATOR_2_3
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif
  common::LargeBlockCache& cache() { return cache_; }

  static HostAllocator* installed;

 private:
  // A cached block goes back to the cache; anything else (raw_allocate of a small size) to the base.
  static void release(void* p) {
    if (p != nullptr && !installed->cache_.give_back(p)) installed->base_->raw_deleter()(p);
  }

  c10::Allocator* base_;
  mutable common::LargeBlockCache cache_;
};

HostAllocator* HostAllocator::installed = nullptr;

}  // namespace

common::LargeBlockCache& use_large_block_cache(size_t threshold) {
  static HostAllocator* allocator = [threshold] {
    // Never destroyed: tensors may outlive every static object.
    HostAllocator::installed = new HostAllocator(c10::GetCPUAllocator(), threshold);
    c10::SetCPUAllocator(HostAllocator::installed, /*priority=*/50);
    return HostAllocator::installed;
  }();
  return allocator->cache();
}

void release_kept_large_blocks() {
  if (HostAllocator::installed != nullptr) HostAllocator::installed->cache().release_kept();
}

}  // namespace shardtune::train
