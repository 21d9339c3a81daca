// Shard and replicate groups from MPI_Comm_split over the pure layout.
#include "runtime/dist/process_groups.h"

#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {

ProcessGroups make_mpi_groups(MPI_Comm world, int shard_size, double timeout_s) {
  int rank = 0, size = 0;
  ST_MPI_CHECK(MPI_Comm_rank(world, &rank));
  ST_MPI_CHECK(MPI_Comm_size(world, &size));
  GroupLayout layout(size, shard_size);

  MPI_Comm world_dup, shard, replicate;
  ST_MPI_CHECK(MPI_Comm_dup(world, &world_dup));
  // The key orders members by world rank, so the group rank is the layout's rank in the group.
  ST_MPI_CHECK(MPI_Comm_split(world, layout.shard_group_of(rank), rank, &shard));
  ST_MPI_CHECK(MPI_Comm_split(world, layout.replicate_group_of(rank), rank, &replicate));
  return ProcessGroups{
      layout,
      std::make_unique<MpiCommunicator>(world_dup, "world", timeout_s),
      std::make_unique<MpiCommunicator>(shard, "shard", timeout_s),
      std::make_unique<MpiCommunicator>(replicate, "replicate", timeout_s),
  };
}

}  // namespace shardtune::dist
