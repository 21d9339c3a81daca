// `shardtune run`'s stops: a stop signal to `shardtune run` (Ctrl-C, TERM, HUP, USR1) becomes the
// ranks' own stop request, as the Slurm batch script makes it: each rank gets SIGUSR1 once its
// handler is installed, reaches its next step boundary, writes a checkpoint and exits 75. mpirun is
// never signalled for a first stop (on TERM or INT it kills its ranks one second later, before they
// reach a boundary); a second signal stops the run at once (TERM to mpirun).
#pragma once

#include <string>
#include <vector>

namespace shardtune::launcher {

// Runs `argv` (mpirun and its arguments) as a child in a process group of its own, relaying stop
// signals to the processes under it named `rank_name` (their /proc comm) as above. Returns the
// child's exit code (128 + the signal when a signal ended it).
int run_relaying_stops(const std::vector<std::string>& argv, const std::string& rank_name);

}  // namespace shardtune::launcher
