// Pure distributed arithmetic, exhaustively: HSDP group layout and the choice of GPU.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "runtime/dist/group_layout.h"
#include "runtime/dist/topology.h"

namespace shardtune::dist {
namespace {

TEST(GroupLayout, EveryDivisorOfEveryWorldUpTo64) {
  for (int world = 1; world <= 64; ++world) {
    for (int shard = 1; shard <= world; ++shard) {
      if (world % shard != 0) {
        EXPECT_THROW(GroupLayout(world, shard), common::Error) << world << "/" << shard;
        continue;
      }
      const GroupLayout layout(world, shard);
      ASSERT_EQ(layout.num_shard_groups() * layout.shard_size(), world);
      std::set<std::pair<int, int>> seen;  // (shard group, replicate group) is unique per rank
      for (int rank = 0; rank < world; ++rank) {
        const int g = layout.shard_group_of(rank), r = layout.replicate_group_of(rank);
        EXPECT_TRUE(seen.insert({g, r}).second);
        const auto shard_members = layout.shard_group_members(g);
        const auto replicate_members = layout.replicate_group_members(r);
        ASSERT_EQ(static_cast<int>(shard_members.size()), shard);
        ASSERT_EQ(static_cast<int>(replicate_members.size()), world / shard);
        // A rank sits at its own group rank in both member lists.
        EXPECT_EQ(shard_members[layout.rank_in_shard_group(rank)], rank);
        EXPECT_EQ(replicate_members[layout.rank_in_replicate_group(rank)], rank);
        // Shard groups are consecutive ranks (one node's ranks when shard = ranks per node).
        EXPECT_EQ(shard_members.front(), g * shard);
        EXPECT_EQ(shard_members.back(), g * shard + shard - 1);
        // Replicate-group members hold the same shard index.
        for (int m : replicate_members) EXPECT_EQ(layout.rank_in_shard_group(m), layout.rank_in_shard_group(rank));
      }
    }
  }
}

TEST(GroupLayout, RejectsNonsense) {
  EXPECT_THROW(GroupLayout(0, 1), common::Error);
  EXPECT_THROW(GroupLayout(4, 0), common::Error);
  try {
    GroupLayout(8, 3);
    FAIL();
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard group 3 vs world 8"), std::string::npos) << e.what();
  }
}

TEST(ChooseDevice, CpuSingleGpuPerTaskAndOnePerLocalRank) {
  EXPECT_EQ(choose_device(3, 4, 0).device, -1);
  EXPECT_EQ(choose_device(3, 4, 1).device, 0);  // srun --gpus-per-task: each task sees device 0
  for (int local = 0; local < 8; ++local) {
    EXPECT_EQ(choose_device(local, 8, 8).device, local);
    EXPECT_EQ(choose_device(local, 8, 16).device, local);
  }
  try {
    choose_device(0, 8, 4);
    FAIL();
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("8 ranks run on this node but only 4 GPUs"), std::string::npos);
  }
}

}  // namespace
}  // namespace shardtune::dist
