// Preflight of NCCL on the rank's GPU: a communicator over the world, one all-reduce on device
// memory checked against the locally known answer. Compiled when CUDA and NCCL are found.
#pragma once

#include <mpi.h>

#include <string>

namespace shardtune::runtime {

// Collective over `world`: true when every rank has a device (>= 0) and no two ranks share one
// (compared by GPU UUID, so it also holds when each task sees its GPU as device 0).
bool every_rank_has_its_own_gpu(MPI_Comm world, int device);

// Collective over `world`. Returns the line to log; throws on a wrong result, an NCCL/CUDA error
// or a timeout.
std::string run_nccl_preflight(MPI_Comm world, int device, double timeout_s);

}  // namespace shardtune::runtime
