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

// Collective over `world`: kNone when no rank has a device, kNccl when each has its own, else
// kHostStaged (with a warning: slow, for running the multi-rank GPU path on one GPU).
DeviceCollectives choose_device_collectives(MPI_Comm world, int device);

}  // namespace shardtune::dist
