// A CPU allocator for tests that counts the bytes of every live tensor allocation: installed once
// for the process (tensors it made may outlive a test), it sees every CPU tensor allocated after.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "runtime/train/allocator_compat.h"

namespace shardtune::testing_support {

// Counts the bytes of every live CPU tensor allocation. Each DataPtr's context is its data (as
// raw_allocate requires); a table maps it back to the base allocator's block.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) ST_ALLOCATE_CONST override {
    c10::DataPtr inner = base_->allocate(n);
    void* p = inner.get();
    if (p == nullptr) return inner;  // zero bytes
    std::lock_guard<std::mutex> lock(mutex());
    live_ += static_cast<int64_t>(n);
    peak_ = std::max(peak_.load(), live_.load());
    blocks().emplace(p, Block{std::move(inner), n});
    return {p, p, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
#if ST_ALLOCATOR_2_3
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif
  static int64_t live() { return live_; }
  // The most bytes live at once since the last reset_peak().
  static int64_t peak() { return peak_; }
  static void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex());
    peak_ = live_.load();
  }

 private:
  struct Block {
    c10::DataPtr inner;  // the base allocator's, freed with the block
    size_t n;
  };
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<void*, Block>& blocks() {
    static std::unordered_map<void*, Block> b;
    return b;
  }
  static void release(void* p) {
    std::lock_guard<std::mutex> lock(mutex());
    auto it = blocks().find(p);
    live_ -= static_cast<int64_t>(it->second.n);
    blocks().erase(it);
  }
  c10::Allocator* base_;
  static inline std::atomic<int64_t> live_{0};
  static inline std::atomic<int64_t> peak_{0};
};

inline CountingAllocator& counting_allocator() {
  static CountingAllocator* a = [] {
    auto* alloc = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(alloc, /*priority=*/100);
    return alloc;
  }();
  return *a;
}

}  // namespace shardtune::testing_support
