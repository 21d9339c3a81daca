// `shardtune run`: the job on this machine without Slurm, its ranks started by mpirun.
#pragma once

#include <string>
#include <vector>

#include "common/job/job.h"

namespace shardtune::launcher {

struct LocalRunOptions {
  std::string rank_exe;        // path of shardtune-rank
  std::string job_file;        // the resolved job file the ranks read
  bool allow_run_as_root = false;
};

// Pure: the mpirun argv for a local run of `job` (one node, world size from the job).
std::vector<std::string> local_mpirun_argv(const job::Job& job, const LocalRunOptions& options);

// The --set overrides that make a job a one-node local run of `ranks` ranks.
std::vector<std::string> local_run_overrides(int ranks);

// Replaces this process with argv[0] (looked up in PATH). Returns only by throwing.
[[noreturn]] void exec_argv(const std::vector<std::string>& argv);

}  // namespace shardtune::launcher
