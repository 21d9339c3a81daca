// Huge host blocks kept for reuse (large_block_cache.h).
#include "common/large_block_cache.h"

#include <sys/mman.h>

#include <new>

namespace shardtune::common {
namespace {

constexpr size_t kGranule = size_t{2} << 20;  // a transparent huge page

}  // namespace

LargeBlockCache::~LargeBlockCache() {
  for (const auto& [block, size] : kept_) ::munmap(block, size);
}

void* LargeBlockCache::take(size_t bytes) {
  const size_t size = (bytes + kGranule - 1) / kGranule * kGranule;
  std::lock_guard<std::mutex> lock(mutex_);
  auto best = kept_.end();
  for (auto it = kept_.begin(); it != kept_.end(); ++it)
    if (it->second >= size && it->second <= size + size / 8 && (best == kept_.end() || it->second < best->second))
      best = it;
  if (best != kept_.end()) {
    const auto [block, kept_size] = *best;
    kept_.erase(best);
    kept_bytes_ -= kept_size;
    live_.emplace(block, kept_size);
    live_bytes_ += kept_size;
    return block;
  }
  void* block = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) throw std::bad_alloc();
  ::madvise(block, size, MADV_HUGEPAGE);  // a hint: without transparent huge pages, 4 KiB pages
  ++mappings_;
  live_.emplace(block, size);
  live_bytes_ += size;
  if (size > largest_) {
    largest_ = size;
    trim();
  }
  return block;
}

bool LargeBlockCache::give_back(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(block);
  if (it == live_.end()) return false;
  const size_t size = it->second;
  live_.erase(it);
  live_bytes_ -= size;
  kept_.emplace_back(block, size);
  kept_bytes_ += size;
  trim();
  return true;
}

void LargeBlockCache::trim() {
  while (kept_bytes_ > largest_ && !kept_.empty()) {
    ::munmap(kept_.front().first, kept_.front().second);
    kept_bytes_ -= kept_.front().second;
    kept_.pop_front();
  }
}

void LargeBlockCache::release_kept() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [block, size] : kept_) ::munmap(block, size);
  kept_.clear();
  kept_bytes_ = 0;
}

LargeBlockCache::Stats LargeBlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {live_bytes_, kept_bytes_, mappings_};
}

}  // namespace shardtune::common
