// Exit codes shared by the ranks and the sbatch script that starts them.
#pragma once

namespace shardtune::common {

// The job file or an override is invalid; nothing ran.
inline constexpr int kExitJobError = 2;
// The ranks stopped on a signal (time limit, preemption) after committing a checkpoint: the
// batch script requeues the job. 75 is EX_TEMPFAIL: "try again later".
inline constexpr int kExitRequeue = 75;

}  // namespace shardtune::common
