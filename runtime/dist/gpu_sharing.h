// How device tensors travel between ranks: NCCL needs every rank on a GPU of its own ("Duplicate
// GPU detected" otherwise); ranks that share a GPU stage through host memory over MPI.
#pragma once

#include <mpi.h>

#include "runtime/dist/process_groups.h"

namespace shardtune::dist {

// GPUs this process can see; 0 without a driver or device, or in a build without the CUDA runtime.
int visible_gpus();

// Collective over `world`: true when every rank has a device (>= 0) and no two ranks share one
// (compared by GPU UUID, so it also holds when each task sees its GPU as device 0). Always false
// in a build without the CUDA runtime.
bool every_rank_has_its_own_gpu(MPI_Comm world, int device);

// kNone when no rank has a device, kNccl when each has its own. Ranks that share a GPU stage their
// collectives through host memory (kHostStaged: slow, for running the multi-rank GPU path on one
// GPU) only when `sharing_allowed`; otherwise a configuration error says which variable allows it.
DeviceCollectives device_collectives_for(bool any_gpu, bool each_has_its_own, bool sharing_allowed);

// Collective over `world`: device_collectives_for this job's ranks, sharing allowed by
// SHARDTUNE_SHARE_GPUS=1 in the environment (warned about on rank 0).
DeviceCollectives choose_device_collectives(MPI_Comm world, int device);

}  // namespace shardtune::dist
