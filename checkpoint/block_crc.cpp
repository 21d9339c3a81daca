// Per-block CRC-32s of checkpoint slices.
#include "checkpoint/block_crc.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <nlohmann/json.hpp>

#include "checkpoint/crc32.h"
#include "common/error.h"

namespace shardtune::checkpoint {

void BlockCrc::add(const float* data, int64_t count) {
  while (count > 0) {
    const int64_t n = std::min(count, block_ - in_block_);
    crc_ = crc32(data, static_cast<size_t>(n) * sizeof(float), crc_);
    in_block_ += n;
    data += n;
    count -= n;
    if (in_block_ == block_) {
      sums_.push_back(crc_);
      crc_ = 0;
      in_block_ = 0;
    }
  }
}

std::vector<uint32_t> BlockCrc::finish() {
  if (in_block_ > 0) sums_.push_back(crc_);
  crc_ = 0;
  in_block_ = 0;
  return std::exchange(sums_, {});
}

std::vector<uint32_t> block_crcs(const float* data, int64_t count, int64_t block) {
  BlockCrc sums(block);
  sums.add(data, count);
  return sums.finish();
}

}  // namespace shardtune::checkpoint
