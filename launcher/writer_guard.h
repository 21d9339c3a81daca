// One writer per output directory, for the commands that start one (`run`, `submit`): a Slurm
// job of the directory that is still queued or running refuses them, and so does the directory's
// lock (common/dir_lock.h) while a `shardtune run` or a start of a batch job holds it.
#pragma once

#include <string>

#include "common/dir_lock.h"

namespace shardtune::launcher {

// Throws Error(kUsage) naming the job and its state when the last Slurm job submitted for
// `output_dir` is still queued, running or waiting to run again; Error(kIo) when scontrol cannot
// tell. Does nothing when no job was submitted from the directory.
void refuse_if_slurm_job_active(const std::string& output_dir);

// Takes the directory's lock for `holder`. Throws Error(kUsage) naming the holder when another
// process has it; on a file system without locks, warns on stderr and returns an unheld lock.
common::DirLock lock_output_dir(const std::string& output_dir, const std::string& holder);

// "<what> on <host> pid <pid>, since <local time>": how a holder names itself in the lock file.
std::string holder_note(const std::string& what);

}  // namespace shardtune::launcher
