// Round and staging arithmetic of streamed loading.
#include "runtime/fsdp/load_plan.h"

#include <algorithm>

#include "common/error.h"

namespace shardtune::fsdp {

int64_t round_count(int64_t numel, int64_t round_numel) {
  ST_CHECK(round_numel > 0 && numel >= 0, common::ErrorKind::kInternal, "rounds of {} elements of {}", round_numel,
           numel);
  return (numel + round_numel - 1) / round_numel;
}

std::vector<RoundParam> round_params(const FlatLayout& layout, const std::vector<size_t>& storage_order,
                                     int64_t round, int64_t round_numel, const std::vector<int64_t>& stored_size) {
  const int64_t first = round * round_numel, last = first + round_numel;
  std::vector<RoundParam> out;
  int64_t at = 0, staged = 0;  // position in storage order; bytes staged so far
  for (size_t param : storage_order) {
    const int64_t numel = layout.params().at(param).numel;
    const int64_t lo = std::max(first, at), hi = std::min(last, at + numel);
    if (lo < hi) {
      out.push_back({param, lo - at, hi - at, staged});
      staged += (hi - lo) * stored_size.at(param);
      staged = (staged + kStageAlignment - 1) / kStageAlignment * kStageAlignment;
    }
    at += numel;
    if (at >= last) break;
  }
  return out;
}

std::vector<ShardTake> shard_takes(const std::vector<RoundParam>& round, const std::vector<ShardPiece>& shard_pieces,
                                   const std::vector<int64_t>& stored_size) {
  std::vector<ShardTake> out;
  for (const RoundParam& r : round) {
    for (const ShardPiece& p : shard_pieces) {  // a parameter has at most one piece in a shard
      if (p.param != r.param) continue;
      const int64_t lo = std::max(r.begin, p.param_offset), hi = std::min(r.end, p.param_offset + p.length);
      if (lo < hi)
        out.push_back({r.param, r.staged_offset + (lo - r.begin) * stored_size.at(r.param),
                       p.shard_offset + (lo - p.param_offset), hi - lo});
    }
  }
  return out;
}

NeededRanges needed_ranges(const FlatLayout& layout, const std::vector<std::vector<ShardPiece>>& pieces,
                           const std::vector<int64_t>& granule) {
  NeededRanges out(layout.params().size());
  for (const std::vector<ShardPiece>& list : pieces) {
    for (const ShardPiece& p : list) {
      const int64_t g = granule.at(p.param), numel = layout.params()[p.param].numel;
      ST_CHECK(g >= 1, common::ErrorKind::kInternal, "a granule of {} elements", g);
      const int64_t end = std::min(numel, (p.param_offset + p.length + g - 1) / g * g);
      out[p.param].emplace_back(p.param_offset, end);
    }
  }
  for (auto& ranges : out) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (const auto& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    ranges = std::move(merged);
  }
  return out;
}

std::vector<RoundParam> round_reads(const std::vector<RoundParam>& round, const NeededRanges& needed,
                                    const std::vector<int64_t>& stored_size) {
  std::vector<RoundParam> out;
  for (const RoundParam& r : round) {
    for (const auto& [first, last] : needed.at(r.param)) {
      const int64_t lo = std::max(r.begin, first), hi = std::min(r.end, last);
      if (lo < hi) out.push_back({r.param, lo, hi, r.staged_offset + (lo - r.begin) * stored_size.at(r.param)});
    }
  }
  return out;
}

int64_t stage_capacity(int64_t round_numel, size_t params, int64_t max_stored_size) {
  const int64_t bytes = round_numel * max_stored_size + static_cast<int64_t>(params) * kStageAlignment;
  return (bytes + kStageAlignment - 1) / kStageAlignment * kStageAlignment;
}

}  // namespace shardtune::fsdp
