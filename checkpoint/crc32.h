// CRC-32 (IEEE 802.3, the values of zlib's crc32) of byte ranges: the block checksums of checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardtune::checkpoint {

// Continues `crc` (0 to start) over `size` bytes.
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace shardtune::checkpoint
