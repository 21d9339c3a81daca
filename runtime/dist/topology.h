// Where this rank runs: node index, local rank and size from MPI's shared-memory split, and the
// GPU it should use, which also works when each task sees a single GPU (srun --gpus-per-task).
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

namespace shardtune::dist {

struct Topology {
  int rank = 0;
  int world_size = 1;
  int node = 0;        // 0 .. num_nodes-1, in the order of the nodes' lowest ranks
  int num_nodes = 1;
  int local_rank = 0;  // rank among the ranks of this node
  int local_size = 1;
  std::string host;
  bool uniform = true;  // every node runs the same number of ranks
  std::vector<std::string> node_hosts;  // hostname of each node (of its local rank 0), by node index
  std::vector<int> rank_nodes;          // node index of every rank, by world rank
};

// Collective over `world`.
Topology discover_topology(MPI_Comm world);

// What the job asks for ([launch] device).
enum class DeviceRequest { kAuto, kCuda, kCpu };

struct DeviceChoice {
  int device = -1;  // CUDA device ordinal, -1 for CPU
  std::string reason;
};

// The rank's index among the ranks of its node, as the launcher numbered them
// (OMPI_COMM_WORLD_LOCAL_RANK under mpirun, even within a Slurm allocation; SLURM_LOCALID under
// srun), or `fallback` (MPI's shared-memory split) when neither is set. `getenv` is injected for tests.
int launcher_local_rank(int fallback, const std::function<const char*(const char*)>& getenv);

// Pure: where this rank trains. cpu: the CPU. cuda: a GPU, else an error (throws
// common::Error(kConfig)) saying why there is none: no GPU visible, or a LibTorch without CUDA.
// auto: cuda when a GPU is visible (an error, not a silent CPU run, when this build cannot use
// it), else the CPU. Which GPU: 1 visible, device 0 (each task was given its own); as many as the
// local ranks or more, device = local_rank; fewer, an error explaining the mismatch.
DeviceChoice choose_device(DeviceRequest request, int local_rank, int local_size, int visible_gpus, bool cuda_build);

}  // namespace shardtune::dist
