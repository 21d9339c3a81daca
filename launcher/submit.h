// `shardtune submit`: the resolved job and its sbatch script written into the job's output
// directory, then sbatch run by argv. Refuses to submit while an earlier job of the same output
// directory is still queued or running, or while another writer holds the directory's lock
// (launcher/writer_guard.h): two jobs would write the same checkpoints.
#pragma once

#include <string>

#include "common/job/job.h"

namespace shardtune::launcher {

struct SubmitOptions {
  std::string rank_exe;      // absolute path of shardtune-rank
  std::string launcher_exe;  // absolute path of shardtune (the batch script asks it for the newest checkpoint)
  bool dry_run = false;  // print the script and the sbatch argv; write nothing, submit nothing
};

// `job` as a batch job needs it: every path of the job file absolute (relative to `cwd`): output and
// checkpoint directories, the model folder, the data and tokenizer files, the PEFT adapter folder
// and an explicit resume path. The resolved job then means the same wherever it is started.
job::Job with_absolute_paths(job::Job job, const std::string& cwd);

// Files of a submitted job, under output_dir.
std::string script_path(const job::Job& job);    // <output_dir>/shardtune.sbatch
std::string resolved_job_path(const job::Job& job);  // <output_dir>/job.toml
std::string job_ids_path(const std::string& output_dir);  // <output_dir>/slurm-job-ids: one id per submission

// The last Slurm job id submitted for `output_dir`, or empty.
std::string last_job_id(const std::string& output_dir);

// Submits (or prints, for a dry run). Returns the process exit code; prints the job id.
int submit(const job::Job& job, const SubmitOptions& options);

}  // namespace shardtune::launcher
