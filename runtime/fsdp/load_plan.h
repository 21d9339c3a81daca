// Pure arithmetic of streamed loading. A flat parameter's parameters are taken in the order the
// source stores them, so the reader reads its files front to back; that sequence of elements is
// cut into rounds of at most round_numel elements. A round is staged in the stored dtypes, each
// parameter's range at an aligned offset, and every rank takes from it the parts of its shard.
// No I/O, no tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/fsdp/shard_layout.h"

namespace shardtune::fsdp {

// Elements [begin, end) of one parameter, staged at `staged_offset` bytes.
struct RoundParam {
  size_t param = 0;  // index into FlatLayout::params()
  int64_t begin = 0;
  int64_t end = 0;
  int64_t staged_offset = 0;
};

// A part of one shard inside a round.
struct ShardTake {
  size_t param = 0;
  int64_t staged_offset = 0;  // bytes, where the elements lie in the staged round
  int64_t shard_offset = 0;   // elements, where they go in the shard
  int64_t length = 0;         // elements
};

// Staged ranges start at multiples of this many bytes.
inline constexpr int64_t kStageAlignment = 64;

// Per parameter of a flat parameter: sorted, disjoint element ranges [first, second).
using NeededRanges = std::vector<std::vector<std::pair<int64_t, int64_t>>>;

// What a reader reads of each parameter for the ranks it serves: the union of their `pieces`
// (FlatLayout::pieces_in_part), each range's end rounded up to a multiple of `granule[param]`
// elements (1: not rounded), but not past the parameter's end: a range that ends inside a granule
// reads the rest of it, so that every whole granule is read by one reader (a digest's chunk).
NeededRanges needed_ranges(const FlatLayout& layout, const std::vector<std::vector<ShardPiece>>& pieces,
                           const std::vector<int64_t>& granule);

// The parts of a round's parameter ranges that fall in `needed`, each staged where it lies in the
// round: what the reader reads of that round. Empty: the round is of no use to its ranks.
std::vector<RoundParam> round_reads(const std::vector<RoundParam>& round, const NeededRanges& needed,
                                    const std::vector<int64_t>& stored_size);

// Number of rounds that stream `numel` elements `round_numel` at a time.
int64_t round_count(int64_t numel, int64_t round_numel);

// The parameter ranges of round `round` of a flat parameter whose parameters are stored in
// `storage_order` (a permutation of parameter indices) with `stored_size[param]` bytes per element.
std::vector<RoundParam> round_params(const FlatLayout& layout, const std::vector<size_t>& storage_order,
                                     int64_t round, int64_t round_numel, const std::vector<int64_t>& stored_size);

// What a shard takes from a staged round; `shard_pieces` are FlatLayout::pieces_in_shard.
std::vector<ShardTake> shard_takes(const std::vector<RoundParam>& round, const std::vector<ShardPiece>& shard_pieces,
                                   const std::vector<int64_t>& stored_size);

// Bytes a buffer needs to stage any round of `round_numel` elements of a flat parameter of
// `params` parameters whose largest stored element is `max_stored_size` bytes; a multiple of
// kStageAlignment, so that buffers laid end to end all start aligned.
int64_t stage_capacity(int64_t round_numel, size_t params, int64_t max_stored_size);

}  // namespace shardtune::fsdp
