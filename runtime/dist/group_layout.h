// Pure arithmetic of hybrid sharding (HSDP): the world is cut into shard groups of consecutive
// ranks (a node's ranks when the shard size is the ranks per node); ranks holding the same shard
// index in every shard group form a replicate group.
#pragma once

#include <vector>

namespace shardtune::dist {

class GroupLayout {
 public:
  // Throws common::Error(kConfig) unless 1 <= shard_size and shard_size divides world_size.
  GroupLayout(int world_size, int shard_size);

  int world_size() const { return world_size_; }
  int shard_size() const { return shard_size_; }
  int num_shard_groups() const { return world_size_ / shard_size_; }
  int replicate_size() const { return num_shard_groups(); }

  int shard_group_of(int rank) const { return rank / shard_size_; }
  int rank_in_shard_group(int rank) const { return rank % shard_size_; }
  int replicate_group_of(int rank) const { return rank % shard_size_; }
  int rank_in_replicate_group(int rank) const { return rank / shard_size_; }

  // World ranks of a group, in group-rank order.
  std::vector<int> shard_group_members(int group) const;
  std::vector<int> replicate_group_members(int group) const;

 private:
  int world_size_;
  int shard_size_;
};

}  // namespace shardtune::dist
