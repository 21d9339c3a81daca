// The allocator of a training process's CPU tensors: those of at least kLargeHostBlockBytes from
// a common::LargeBlockCache, reused whole from step to step; the rest from LibTorch's own CPU
// allocator (malloc: tcmalloc in the ranks, common/process_memory.h).
#pragma once

#include <cstddef>

#include "common/large_block_cache.h"

namespace shardtune::train {

inline constexpr size_t kLargeHostBlockBytes = size_t{256} << 20;

// Installs it for every CPU tensor allocated from now on (once a process; later calls return the
// same cache). Tensors allocated before keep their own allocator's deleter.
common::LargeBlockCache& use_large_block_cache(size_t threshold = kLargeHostBlockBytes);

// Unmaps the blocks the cache keeps unused, where one is installed: once, after loading, whose
// huge staging tensors the steps do not ask for again.
void release_kept_large_blocks();

}  // namespace shardtune::train
