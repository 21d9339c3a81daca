// A Slurm job's state, from `scontrol show job -o <id>` run by argv.
#pragma once

#include <map>
#include <string>

namespace shardtune::slurm {

struct JobInfo {
  bool known = false;  // slurmctld still knows the job (queued, running, or recently ended)
  std::string error;   // why scontrol could not say (controller unreachable, ...); empty when it answered
  std::map<std::string, std::string> fields;  // JobState, Reason, RunTime, Restarts, ExitCode, NodeList, ...
  std::string field(const std::string& key) const;
};

// Pure: the fields of `scontrol show job -o` output (one line of Key=Value words).
JobInfo parse_scontrol_job(const std::string& text);

// Pure: what `scontrol show job -o` printed and how it exited. A job slurmctld no longer knows
// ("Invalid job id specified") is not known; any other failure sets `error`.
JobInfo scontrol_job_result(int exit_code, const std::string& out, const std::string& err);

JobInfo query_job(const std::string& job_id);

// JobState of the job, or "UNKNOWN" when slurmctld does not know it (any more). Throws
// Error(kIo) when scontrol cannot tell (it failed otherwise): "not running" is never a guess.
std::string query_job_state(const std::string& job_id);

// Queued, running, or about to run again (PENDING, RUNNING, REQUEUED, COMPLETING, ...).
bool is_active_state(const std::string& state);

}  // namespace shardtune::slurm
