// The sbatch script: a pure function of the resolved job. `#SBATCH` lines come from [slurm];
// the body starts the ranks (srun or mpirun, per [launch]), forwards Slurm's stop signal to
// them, and requeues the job from the batch shell when the ranks exit with the requeue code
// after making progress, at most [slurm] max_requeues times.
#pragma once

#include <string>
#include <vector>

#include "common/job/job.h"

namespace shardtune::slurm {

struct ScriptPaths {
  std::string rank_exe;      // absolute path of shardtune-rank
  std::string job_file;      // absolute path of the resolved job file the ranks read
  std::string launcher_exe;  // absolute path of shardtune: `checkpoint-position` names the newest checkpoint
};

// Throws common::Error(kConfig) if a value cannot be written safely (the job schema already
// rejects such values; this is the second line of defence). Paths in the job must be absolute.
std::string sbatch_script(const job::Job& job, const ScriptPaths& paths);

// The `#SBATCH` options of the script, in order, without the "#SBATCH " prefix.
std::vector<std::string> sbatch_options(const job::Job& job);

// The file rank 0 creates once every rank handles the stop signal; the batch script passes
// Slurm's stop signal on to the ranks only when it exists.
std::string ranks_ready_file(const std::string& output_dir, const std::string& job_id);

// The note a rank leaves when a collective timed out because peers never arrived. When the ranks
// fail and a node of the allocation is lost (down, or it does not run a step), the batch script
// submits the job again without that node, quoting this note (Slurm would hold a requeued job to
// the node count it ran on); the job resumes from its checkpoint on the nodes it gets (min_nodes to
// nodes), within max_requeues. Ranks that failed on nodes that are all still there are not restarted.
std::string lost_peers_file(const std::string& output_dir, const std::string& job_id);

// <output_dir>/shardtune.sbatch, the script `submit` writes (and the batch script resubmits), and
// <output_dir>/slurm-job-ids, one id per submission, the newest last.
std::string script_file(const std::string& output_dir);
std::string job_ids_file(const std::string& output_dir);

// Where Slurm writes the batch script's output (%j: the job id).
std::string slurm_log_pattern(const job::Job& job);

// The exact argv that submits the script.
std::vector<std::string> sbatch_argv(const std::string& script_path);

}  // namespace shardtune::slurm
