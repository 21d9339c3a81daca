// CRC-32 through zlib, whose implementation runs at memory speed (a byte-wise table would make
// checksums the bottleneck of checkpoint I/O).
#include "checkpoint/crc32.h"

#include <zlib.h>

#include <algorithm>

namespace shardtune::checkpoint {

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  // zlib takes uInt lengths: feed it in pieces of at most 1 GiB.
  while (size > 0) {
    const size_t n = std::min<size_t>(size, size_t{1} << 30);
    c = ::crc32(c, p, static_cast<uInt>(n));
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace shardtune::checkpoint
