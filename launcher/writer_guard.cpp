#include "launcher/writer_guard.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>
#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "launcher/submit.h"
#include "slurm/job_state.h"

namespace shardtune::launcher {

using common::ErrorKind;

void refuse_if_slurm_job_active(const std::string& output_dir) {
  const std::string previous = last_job_id(output_dir);
  if (previous.empty()) return;
  const std::string state = slurm::query_job_state(previous);
  ST_CHECK(!slurm::is_active_state(state), ErrorKind::kUsage,
           "Slurm job {} of {} is still {}: a second writer would corrupt its checkpoints. HINT: wait for it, or "
           "`scancel {}`",
           previous, output_dir, state, previous);
}

namespace {

common::DirLock lock_dir(const std::string& dir, const std::string& holder, const char* key) {
  common::DirLock lock = common::DirLock::try_acquire(dir, holder);
  ST_CHECK(lock.outcome() != common::DirLock::Outcome::kRefused, ErrorKind::kUsage,
           "{} is in use by {}: a second writer would corrupt its checkpoints. HINT: wait for it to end, or choose "
           "another {}",
           dir, lock.detail(), key);
  if (lock.outcome() == common::DirLock::Outcome::kUnsupported)
    std::cerr << fmt::format("shardtune: warning: {}: nothing keeps a second job out of {}\n", lock.detail(), dir);
  return lock;
}

}  // namespace

std::vector<common::DirLock> lock_job_dirs(const job::Job& job, const std::string& holder) {
  std::vector<common::DirLock> locks;
  locks.push_back(lock_dir(job.job.output_dir, holder, "[job] output_dir"));
  std::error_code ec;
  std::filesystem::create_directories(job.checkpoint.dir, ec);  // to compare it; the lock reports failures
  if (!common::same_directory(job.job.output_dir, job.checkpoint.dir))
    locks.push_back(lock_dir(job.checkpoint.dir, holder, "[checkpoint] dir"));
  return locks;
}

std::string holder_note(const std::string& what) {
  const std::time_t now = std::time(nullptr);
  return fmt::format("{} on {}, since {:%F %T}", what, common::this_process(), fmt::localtime(now));
}

}  // namespace shardtune::launcher
