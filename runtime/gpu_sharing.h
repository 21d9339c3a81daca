// Whether the ranks' GPUs are all distinct, which NCCL needs ("Duplicate GPU detected" otherwise).
// Compiled when CUDA is found; needs the CUDA runtime only, not a CUDA LibTorch.
#pragma once

#include <mpi.h>

namespace shardtune::runtime {

// Collective over `world`: true when every rank has a device (>= 0) and no two ranks share one
// (compared by GPU UUID, so it also holds when each task sees its GPU as device 0).
bool every_rank_has_its_own_gpu(MPI_Comm world, int device);

}  // namespace shardtune::runtime
