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

SliceSums slice_sums(const nlohmann::json& manifest, const nlohmann::json& slice, const std::string& where) {
  SliceSums out;
  try {
    const int64_t length = slice.at("length");
    if (slice.contains("crc32")) {  // format 1
      out.block = std::max<int64_t>(length, 1);
      if (length > 0) out.crcs = {slice.at("crc32").get<uint32_t>()};
      return out;
    }
    out.block = manifest.at("crc32_block");
    out.crcs = slice.at("crc32_blocks").get<std::vector<uint32_t>>();
    ST_CHECK(out.block > 0, common::ErrorKind::kIo, "{}: crc32_block is {}", where, out.block);
    const int64_t want = (length + out.block - 1) / out.block;
    ST_CHECK(static_cast<int64_t>(out.crcs.size()) == want, common::ErrorKind::kIo,
             "{}: {} checksums listed for {} blocks: the manifest is broken", where, out.crcs.size(), want);
  } catch (const nlohmann::json::exception& e) {
    common::raise(common::ErrorKind::kIo, fmt::format("{}: the manifest is broken: {}", where, e.what()));
  }
  return out;
}

}  // namespace shardtune::checkpoint
