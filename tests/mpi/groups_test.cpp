// Shard and replicate groups for every shard-group size that divides the world size (at world
// size 4: shard groups of 1, 2 and 4), checked against the pure layout, and the HSDP gradient
// reduction (reduce-scatter in the shard group, then all-reduce across replicas) against the
// global sum. A group of all the ranks is the world's communicator itself.
#include <ATen/ops/empty.h>
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>

#include "common/error.h"
#include "runtime/dist/device_communicator.h"
#include "runtime/dist/process_groups.h"

namespace shardtune::dist {
namespace {

// A group of one rank (a NO_SHARD job's shard groups, a one-rank job's every group): each
// collective's result is its input, and none reaches the backend.
TEST(ProcessGroups, AGroupOfOneRankCallsNoBackend) {
  ProcessGroups groups = make_mpi_groups(MPI_COMM_WORLD, 1, 60.0);
  auto& one = dynamic_cast<DeviceCommunicator&>(*groups.shard);
  ASSERT_EQ(one.size(), 1);
  const uint64_t before = one.host().collectives_started();
  const at::Tensor in = at::arange(6, at::kFloat);
  at::Tensor out = at::zeros({6}, at::kFloat);
  one.all_gather(in, out);
  EXPECT_TRUE(out.equal(in));
  one.all_gather(out, out);  // in place: the input is the output's own slot
  EXPECT_TRUE(out.equal(in));
  at::Tensor reduced = at::zeros({6}, at::kFloat);
  one.reduce_scatter(in, reduced, ReduceOp::kAvg);
  EXPECT_TRUE(reduced.equal(in));
  at::Tensor summed = in.clone();
  one.all_reduce(summed, ReduceOp::kSum);
  EXPECT_TRUE(summed.equal(in));
  one.broadcast(summed, 0);
  at::Tensor gathered = at::zeros({6}, at::kFloat);
  one.gather(in, gathered, 0);
  EXPECT_TRUE(gathered.equal(in));
  EXPECT_EQ(one.host().collectives_started(), before);
  // The checks a backend makes still hold.
  EXPECT_THROW(one.broadcast(summed, 1), common::Error);
  at::Tensor wrong = at::zeros({5}, at::kFloat);
  EXPECT_THROW(one.all_gather(in, wrong), common::Error);
  EXPECT_THROW(one.reduce_scatter(in, wrong, ReduceOp::kSum), common::Error);
  // A group of two or more still goes to its backend.
  if (groups.world->size() > 1) {
    auto& world = dynamic_cast<DeviceCommunicator&>(*groups.world);
    const uint64_t world_before = world.host().collectives_started();
    at::Tensor t = in.clone();
    world.all_reduce(t, ReduceOp::kSum);
    EXPECT_TRUE(t.equal(in.mul(world.size())));
    EXPECT_GT(world.host().collectives_started(), world_before);
  }
}

double grad_value(int rank, int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 11) - 5.0; }

TEST(ProcessGroups, EveryDivisorOfTheWorld) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int shard = 1; shard <= world; ++shard) {
    if (world % shard != 0) continue;
    SCOPED_TRACE(testing::Message() << "world " << world << " shard group " << shard);
    ProcessGroups groups = make_mpi_groups(MPI_COMM_WORLD, shard, 60.0);
    const GroupLayout& layout = groups.layout;
    EXPECT_EQ(groups.world->size(), world);
    EXPECT_EQ(groups.shard->size(), shard);
    EXPECT_EQ(groups.replicate->size(), world / shard);
    EXPECT_EQ(groups.shard->rank(), layout.rank_in_shard_group(rank));
    EXPECT_EQ(groups.replicate->rank(), layout.rank_in_replicate_group(rank));
    EXPECT_EQ(groups.shard->world_ranks(), layout.shard_group_members(layout.shard_group_of(rank)));
    EXPECT_EQ(groups.replicate->world_ranks(), layout.replicate_group_members(layout.replicate_group_of(rank)));
    // A group of every rank is the world's own communicator (one NCCL communicator, not two);
    // smaller groups have their own.
    EXPECT_EQ(groups.shard == groups.world, shard == world);
    EXPECT_EQ(groups.replicate == groups.world, shard == 1);

    // Communication really stays inside each group: gather world ranks.
    at::Tensor me = at::empty({1}, at::kLong);
    me.fill_(rank);
    at::Tensor members = at::empty({shard}, at::kLong);
    groups.shard->all_gather(me, members);
    for (int i = 0; i < shard; ++i) EXPECT_EQ(members[i].item<int64_t>(), layout.shard_group_members(layout.shard_group_of(rank))[i]);
    at::Tensor replicas = at::empty({world / shard}, at::kLong);
    groups.replicate->all_gather(me, replicas);
    for (int i = 0; i < world / shard; ++i)
      EXPECT_EQ(replicas[i].item<int64_t>(), layout.replicate_group_members(layout.replicate_group_of(rank))[i]);

    // HSDP gradient reduction equals the global average, slice by slice.
    const int64_t per_rank = 5;
    const int64_t n = per_rank * shard;
    at::Tensor grad = at::empty({n}, at::kFloat);
    for (int64_t i = 0; i < n; ++i) grad[i] = grad_value(rank, i);
    at::Tensor my_shard = at::empty({per_rank}, at::kFloat);
    groups.shard->reduce_scatter(grad, my_shard, ReduceOp::kAvg);
    groups.replicate->all_reduce(my_shard, ReduceOp::kAvg);
    const int64_t offset = layout.rank_in_shard_group(rank) * per_rank;
    for (int64_t i = 0; i < per_rank; ++i) {
      double sum = 0;
      for (int r = 0; r < world; ++r) sum += grad_value(r, offset + i);
      EXPECT_NEAR(my_shard[i].item<float>(), sum / world, 1e-6) << "element " << offset + i;
    }
  }
}

}  // namespace
}  // namespace shardtune::dist
