// The communicators one rank trains with: the world, its shard group (ranks that shard the model
// among them) and its replicate group (ranks that hold the same shard).
#pragma once

#include <mpi.h>

#include <memory>

#include "runtime/dist/group_layout.h"
#include "runtime/dist/mpi_communicator.h"

namespace shardtune::dist {

struct ProcessGroups {
  GroupLayout layout;
  std::unique_ptr<MpiCommunicator> world;
  std::unique_ptr<MpiCommunicator> shard;
  std::unique_ptr<MpiCommunicator> replicate;
};

// Collective over `world` (which is duplicated, never freed). shard_size: the world size for
// FULL_SHARD/SHARD_GRAD_OP, 1 for NO_SHARD, the HSDP shard group size for HYBRID_SHARD.
ProcessGroups make_mpi_groups(MPI_Comm world, int shard_size, double timeout_s);

}  // namespace shardtune::dist
