// Shards split between replicas.
#include "runtime/fsdp/replica_parts.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

#include "common/error.h"

namespace shardtune::fsdp {

void share_parts(at::Tensor& shard, dist::Communicator& replicas, int64_t align, int64_t chunk) {
  const int parts = replicas.size();
  if (parts == 1) return;
  ST_CHECK(shard.dim() == 1 && shard.is_contiguous() && chunk > 0, common::ErrorKind::kInternal,
           "sharing parts of a {}-d shard", shard.dim());
  const int64_t numel = shard.numel();
  int64_t longest = 0;
  for (int i = 0; i < parts; ++i) longest = std::max(longest, replica_part(numel, parts, i, align).length());
  const int64_t step = std::min(chunk, std::max<int64_t>(longest, 1));
  const ShardPart mine = replica_part(numel, parts, replicas.rank(), align);
  at::Tensor send = at::zeros({step}, shard.options());
  at::Tensor received = at::empty({step * parts}, shard.options());
  // Round j moves elements [j * step, (j + 1) * step) of every part; past the end of a shorter
  // part its buffer holds what it held before, which nobody keeps.
  for (int64_t at = 0; at < longest; at += step) {
    const int64_t own = std::clamp<int64_t>(mine.length() - at, 0, step);
    if (own > 0) send.narrow(0, 0, own).copy_(shard.narrow(0, mine.begin + at, own));
    replicas.all_gather(send, received);
    for (int i = 0; i < parts; ++i) {
      if (i == replicas.rank()) continue;
      const ShardPart theirs = replica_part(numel, parts, i, align);
      const int64_t n = std::clamp<int64_t>(theirs.length() - at, 0, step);
      if (n > 0) shard.narrow(0, theirs.begin + at, n).copy_(received.narrow(0, i * step, n));
    }
  }
}

}  // namespace shardtune::fsdp
