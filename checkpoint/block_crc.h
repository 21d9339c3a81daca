// Checksums of checkpoint slices, one CRC-32 per block of kCrcBlock float32 elements (the last
// block of a slice may be shorter). A reader that needs part of a slice (another world size,
// another strategy, a full checkpoint read by many ranks) reads and checks only the blocks it
// overlaps, and never needs a buffer larger than one block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::checkpoint {

inline constexpr int64_t kCrcBlock = int64_t{1} << 22;  // elements: 16 MiB of float32

// The sums of a slice fed front to back in pieces of any size.
class BlockCrc {
 public:
  BlockCrc() = default;
  explicit BlockCrc(int64_t block) : block_(block) {}
  void add(const float* data, int64_t count);
  std::vector<uint32_t> finish();  // closes the last (shorter) block; the object starts over

 private:
  int64_t block_ = kCrcBlock, in_block_ = 0;
  uint32_t crc_ = 0;
  std::vector<uint32_t> sums_;
};

std::vector<uint32_t> block_crcs(const float* data, int64_t count, int64_t block = kCrcBlock);

}  // namespace shardtune::checkpoint
