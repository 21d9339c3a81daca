// Pure arithmetic of flat parameters: where each parameter sits in a unit's flat buffer, how the
// buffer is padded to divide evenly among the shard group, which flat range each rank owns, and
// which slices of which parameters fall in a rank's shard. No I/O, no tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::fsdp {

struct ParamSpan {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t offset = 0;  // in the flat buffer
};

// A piece of one parameter inside one shard.
struct ShardPiece {
  size_t param = 0;           // index into FlatLayout::params()
  int64_t param_offset = 0;   // first element of the piece within the (flattened) parameter
  int64_t shard_offset = 0;   // where it lies within the shard
  int64_t length = 0;
};

// Elements [begin, end) of a shard.
struct ShardPart {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t length() const { return end - begin; }
};

// Part `index` of `parts` of a shard of `numel` elements, for replicas that split a shard between
// them (runtime/fsdp/replica_parts.h): consecutive, as even as `align` allows (every boundary a
// multiple of `align` elements, but the shard's end).
ShardPart replica_part(int64_t numel, int parts, int index, int64_t align = 1);

class FlatLayout {
 public:
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
  };
  // Parameters are laid out in the given order; the total is padded with zeros up to a multiple
  // of shard_count. With `align` > 1, every parameter starts at a multiple of `align` elements and
  // every shard holds a whole number of them (zeros fill the gaps): quantised storage, whose
  // records of `align` elements belong to one parameter and one shard. Throws
  // common::Error(kInternal) for shard_count < 1, align < 1 or negative dimensions.
  FlatLayout(const std::vector<Entry>& entries, int shard_count, int64_t align = 1);

  const std::vector<ParamSpan>& params() const { return params_; }
  int shard_count() const { return shard_count_; }
  int64_t numel() const { return numel_; }                  // the parameters' elements, without padding
  int64_t align() const { return align_; }
  int64_t padded_numel() const { return shard_numel_ * shard_count_; }
  int64_t padding() const { return padded_numel() - numel_; }
  int64_t shard_numel() const { return shard_numel_; }
  int64_t shard_begin(int shard) const { return shard * shard_numel_; }

  // The pieces of parameters inside `shard`, in flat order; padding is not a piece.
  std::vector<ShardPiece> pieces_in_shard(int shard) const;
  // Those pieces cut to elements `part` of the shard.
  std::vector<ShardPiece> pieces_in_part(int shard, ShardPart part) const;

  // The layout of one value per `block` elements of each parameter (an 8-bit optimizer's scales),
  // each parameter a vector of ceil(numel / block) values: block b of this layout's shard s is
  // element b of the other's shard s. Throws common::Error(kInternal) unless align() is a multiple
  // of `block`.
  FlatLayout blocks(int64_t block) const;

 private:
  std::vector<ParamSpan> params_;
  int shard_count_;
  int64_t align_;
  int64_t numel_ = 0;
  int64_t shard_numel_ = 0;
};

}  // namespace shardtune::fsdp
