// Where this rank runs: node index, local rank and size from MPI's shared-memory split, and the
// GPU it should use, which also works when each task sees a single GPU (srun --gpus-per-task).
#pragma once

#include <mpi.h>

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

struct DeviceChoice {
  int device = -1;  // CUDA device ordinal, -1 for CPU
  std::string reason;
};

// Pure: which GPU this rank uses. 0 visible GPUs: CPU. 1 visible: device 0 (each task was given
// its own GPU). As many as the local ranks or more: device = local_rank. Otherwise an error
// explaining the mismatch (throws common::Error(kConfig)).
DeviceChoice choose_device(int local_rank, int local_size, int visible_gpus);

}  // namespace shardtune::dist
