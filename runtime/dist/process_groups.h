// The communicators one rank trains with: the world, its shard group (ranks that shard the model
// among them) and its replicate group (ranks that hold the same shard). Each carries CPU tensors
// over MPI and device tensors over the job's device backend.
#pragma once

#include <mpi.h>

#include <memory>

#include "runtime/dist/communicator.h"
#include "runtime/dist/group_layout.h"

namespace shardtune::dist {

// How collectives on device tensors travel.
enum class DeviceCollectives {
  kNone,        // a CPU job: no device tensors
  kNccl,        // NCCL, one communicator per group (every rank has a GPU of its own)
  kHostStaged,  // MPI through host buffers (ranks share a GPU: NCCL refuses that)
};

struct GroupOptions {
  double timeout_s = 300.0;
  int device = -1;  // the CUDA device of this rank, -1 for CPU
  DeviceCollectives device_collectives = DeviceCollectives::kNone;
};

struct ProcessGroups {
  GroupLayout layout;
  // A group of the same ranks as the world (the shard group under FULL_SHARD and SHARD_GRAD_OP,
  // the replicate group under NO_SHARD) is the world's communicator itself: one set of NCCL
  // buffers and one connection setup, not two.
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> shard;
  std::shared_ptr<Communicator> replicate;
};

// Why the job's groups can no longer be trusted, "" while they can: the first failed group (its
// name and reason), or the process's first collective failure on any group.
std::string groups_failure(const ProcessGroups& groups);

// Collective over `world` (which is duplicated, never freed). shard_size: the world size for
// FULL_SHARD/SHARD_GRAD_OP, 1 for NO_SHARD, the HSDP shard group size for HYBRID_SHARD.
ProcessGroups make_process_groups(MPI_Comm world, int shard_size, const GroupOptions& options);

// CPU groups: make_process_groups without a device backend.
ProcessGroups make_mpi_groups(MPI_Comm world, int shard_size, double timeout_s);

// The NCCL communicator of one group, over the ranks of `host`. Defined by the CUDA build; a
// build whose LibTorch has no CUDA throws common::Error(kConfig) saying so.
class MpiCommunicator;
std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator& host, int device, double timeout_s);

}  // namespace shardtune::dist
