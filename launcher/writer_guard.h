// One writer per output directory and per checkpoint directory, for the commands that start one
// (`run`, `submit`): a Slurm job of the output directory that is still queued or running refuses
// them, and so do the directories' locks (common/dir_lock.h) while a `shardtune run` or a start of a
// batch job holds them.
#pragma once

#include <string>
#include <vector>

#include "common/dir_lock.h"
#include "common/job/job.h"

namespace shardtune::launcher {

// Throws Error(kUsage) naming the job and its state when the last Slurm job submitted for
// `output_dir` is still queued, running or waiting to run again; Error(kIo) when scontrol cannot
// tell. Does nothing when no job was submitted from the directory.
void refuse_if_slurm_job_active(const std::string& output_dir);

// Takes the locks of the job's output directory and of its checkpoint directory (once when they are
// one directory, however spelled) for `holder`. Throws Error(kUsage) naming the directory and its
// holder when another process has either; on a file system without locks, warns on stderr and
// returns unheld locks.
std::vector<common::DirLock> lock_job_dirs(const job::Job& job, const std::string& holder);

// "<what> on <host> pid <pid>, since <local time>": how a holder names itself in the lock file.
std::string holder_note(const std::string& what);

}  // namespace shardtune::launcher
