// Host blocks of at least a threshold (256 MiB in the ranks), mapped from the system and kept for
// the next request of about their size. A training step allocates and frees the same few huge
// tensors in the same order every step (a gathered 128k-word embedding, 1 GiB in fp32; a block
// dequantised from NF4; the logits), and a general-purpose heap placed them differently from step
// to step: the holes one left did not fit the next, and a rank's memory grew 0.5 GiB above what
// its tensors held at once in some runs and not in others (docs/planner.md). Kept here, each is
// reused whole, mapped once. Bounded: what is kept unused never exceeds the largest block ever
// asked for; the oldest kept blocks go back to the system first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace shardtune::common {

class LargeBlockCache {
 public:
  explicit LargeBlockCache(size_t threshold) : threshold_(threshold) {}
  LargeBlockCache(const LargeBlockCache&) = delete;
  LargeBlockCache& operator=(const LargeBlockCache&) = delete;
  ~LargeBlockCache();  // unmaps the kept blocks (blocks in use stay mapped)

  size_t threshold() const { return threshold_; }

  // A block of at least `bytes` (a multiple of 2 MiB): a kept one of between that and 1/8 more,
  // the smallest such, else a new mapping (transparent huge pages asked for). Throws
  // std::bad_alloc when the system has no memory for it.
  void* take(size_t bytes);
  // Keeps a block `take` gave; false (and nothing done) for any other pointer.
  bool give_back(void* block);

  // Unmaps every kept block.
  void release_kept();

  struct Stats {
    size_t live_bytes = 0;    // taken and not given back
    size_t kept_bytes = 0;    // given back and kept for reuse
    int64_t mappings = 0;     // blocks mapped from the system so far
  };
  Stats stats() const;

 private:
  void trim();  // with the lock held: unmaps the oldest kept blocks beyond the bound

  const size_t threshold_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;     // block -> its mapped size
  std::list<std::pair<void*, size_t>> kept_;   // oldest first
  size_t live_bytes_ = 0, kept_bytes_ = 0, largest_ = 0;
  int64_t mappings_ = 0;
};

}  // namespace shardtune::common
