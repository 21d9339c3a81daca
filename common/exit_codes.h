// Exit codes shared by the ranks and the sbatch script that starts them.
#pragma once

namespace shardtune::common {

// The job file or an override is invalid; nothing ran.
inline constexpr int kExitJobError = 2;
// Training diverged (a non-finite loss, gradient norm or weight, [train] on_nonfinite): the
// newest checkpoint is the last finite one. Never requeued: running again would diverge again.
inline constexpr int kExitDiverged = 3;
// The ranks stopped on a signal (time limit, preemption) after committing a checkpoint: the
// batch script requeues the job. 75 is EX_TEMPFAIL: "try again later".
inline constexpr int kExitRequeue = 75;

}  // namespace shardtune::common
