// What Slurm tells a rank about its allocation, and the check that MPI started the ranks the
// job asked for, one per GPU, on distinct hosts. Pure: the environment and MPI's view come in
// as values, so every mismatch can be tested without a cluster.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/job/job.h"

namespace shardtune::slurm {

struct SlurmEnv {
  bool in_job = false;                  // SLURM_JOB_ID is set
  std::string job_id;
  int64_t num_nodes = 0;                // SLURM_JOB_NUM_NODES (or SLURM_NNODES)
  std::string node_list;                // SLURM_JOB_NODELIST
  int64_t restart_count = 0;            // SLURM_RESTART_COUNT + SHARDTUNE_RESTARTS (resubmissions after a lost node)
};

using GetEnv = std::function<const char*(const char*)>;
SlurmEnv read_slurm_env(const GetEnv& getenv);

// How MPI placed the ranks, as seen by every rank.
struct Placement {
  int world_size = 1;
  int num_nodes = 1;                    // by shared memory
  bool uniform = true;                  // the same number of ranks on every node
  int local_size = 1;                   // ranks on this rank's node
  std::vector<std::string> node_hosts;  // hostname of each node
  int visible_gpus = 0;                 // GPUs this rank can see
};

// Every way the placement disagrees with the job and the allocation, each a full sentence with
// the values involved and a hint; empty when consistent.
std::vector<std::string> placement_problems(const job::Job& job, const Placement& placement, const SlurmEnv& env);

}  // namespace shardtune::slurm
