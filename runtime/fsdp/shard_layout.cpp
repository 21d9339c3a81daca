// Flat-parameter layout arithmetic.
#include "runtime/fsdp/shard_layout.h"

#include <algorithm>

#include "common/error.h"

namespace shardtune::fsdp {

FlatLayout::FlatLayout(const std::vector<Entry>& entries, int shard_count, int64_t align)
    : shard_count_(shard_count), align_(align) {
  ST_CHECK(shard_count >= 1 && align >= 1, common::ErrorKind::kInternal, "flat layout over {} shards aligned to {}",
           shard_count, align);
  auto align_up = [align](int64_t n) { return (n + align - 1) / align * align; };
  int64_t end = 0;
  for (const Entry& e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) {
      ST_CHECK(d >= 0, common::ErrorKind::kInternal, "parameter {} has a negative dimension", e.name);
      n *= d;
    }
    const int64_t offset = align_up(end);
    params_.push_back({e.name, e.shape, n, offset});
    end = offset + n;
    numel_ += n;
  }
  const int64_t units = align_up(end) / align;
  shard_numel_ = (units + shard_count - 1) / shard_count * align;
}

std::vector<ShardPiece> FlatLayout::pieces_in_shard(int shard) const {
  ST_CHECK(shard >= 0 && shard < shard_count_, common::ErrorKind::kInternal, "shard {} of {}", shard, shard_count_);
  const int64_t begin = shard_begin(shard), end = begin + shard_numel_;
  std::vector<ShardPiece> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpan& p = params_[i];
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo < hi) out.push_back({i, lo - p.offset, lo - begin, hi - lo});
  }
  return out;
}

std::vector<ShardPiece> FlatLayout::pieces_in_part(int shard, ShardPart part) const {
  std::vector<ShardPiece> out;
  for (const ShardPiece& p : pieces_in_shard(shard)) {
    const int64_t lo = std::max(part.begin, p.shard_offset), hi = std::min(part.end, p.shard_offset + p.length);
    if (lo < hi) out.push_back({p.param, p.param_offset + (lo - p.shard_offset), lo, hi - lo});
  }
  return out;
}

FlatLayout FlatLayout::blocks(int64_t block) const {
  ST_CHECK(block >= 1 && align_ % block == 0, common::ErrorKind::kInternal, "blocks of {} in a layout aligned to {}",
           block, align_);
  std::vector<Entry> entries;
  for (const ParamSpan& p : params_) entries.push_back({p.name, {(p.numel + block - 1) / block}});
  FlatLayout out(entries, shard_count_, align_ / block);
  ST_CHECK(out.shard_numel_ * block == shard_numel_, common::ErrorKind::kInternal,
           "a layout of blocks of {} with shards of {} for shards of {}", block, out.shard_numel_, shard_numel_);
  return out;
}

ShardPart replica_part(int64_t numel, int parts, int index, int64_t align) {
  ST_CHECK(parts >= 1 && index >= 0 && index < parts && align >= 1 && numel >= 0, common::ErrorKind::kInternal,
           "part {} of {} of {} elements (aligned to {})", index, parts, numel, align);
  const int64_t units = (numel + align - 1) / align;  // the last may be short
  auto boundary = [&](int64_t i) { return std::min(numel, (units * i / parts) * align); };
  return {boundary(index), index + 1 == parts ? numel : boundary(index + 1)};
}

}  // namespace shardtune::fsdp
