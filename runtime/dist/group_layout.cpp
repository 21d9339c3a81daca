// HSDP group arithmetic.
#include "runtime/dist/group_layout.h"

#include <fmt/format.h>

#include "common/error.h"

namespace shardtune::dist {

GroupLayout::GroupLayout(int world_size, int shard_size) : world_size_(world_size), shard_size_(shard_size) {
  ST_CHECK(world_size >= 1, common::ErrorKind::kConfig, "world size must be at least 1, got {}", world_size);
  ST_CHECK(shard_size >= 1 && world_size % shard_size == 0, common::ErrorKind::kConfig,
           "the shard group size must divide the world size: shard group {} vs world {}", shard_size, world_size);
}

std::vector<int> GroupLayout::shard_group_members(int group) const {
  std::vector<int> out;
  for (int i = 0; i < shard_size_; ++i) out.push_back(group * shard_size_ + i);
  return out;
}

std::vector<int> GroupLayout::replicate_group_members(int group) const {
  std::vector<int> out;
  for (int g = 0; g < num_shard_groups(); ++g) out.push_back(g * shard_size_ + group);
  return out;
}

}  // namespace shardtune::dist
