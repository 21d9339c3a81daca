// A stop request from Slurm: SIGUSR1 (the --signal lead before the time limit, or preemption)
// or SIGTERM. The handler only records it; the trainer makes all ranks agree on it at the next
// step boundary, writes one checkpoint and stops. Further signals change nothing: at a time
// limit Slurm sends SIGTERM both to the ranks and to srun, which forwards it again. Only
// SIGKILL (KillWait) cuts a save short, and the checkpoint commit protocol keeps the previous
// checkpoint intact when it does.
#pragma once

namespace shardtune::train {

// Installs the handlers for SIGUSR1 and SIGTERM. Idempotent.
void install_stop_handlers();

// The signal that asked this process to stop, or 0.
int stop_signal();

// Records a stop request as if `signal` had arrived (for tests).
void request_stop(int signal);

}  // namespace shardtune::train
