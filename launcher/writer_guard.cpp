#include "launcher/writer_guard.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>
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

common::DirLock lock_output_dir(const std::string& output_dir, const std::string& holder) {
  common::DirLock lock = common::DirLock::try_acquire(output_dir, holder);
  ST_CHECK(lock.outcome() != common::DirLock::Outcome::kRefused, ErrorKind::kUsage,
           "{} is in use by {}: a second writer would corrupt its checkpoints. HINT: wait for it to end, or choose "
           "another job.output_dir",
           output_dir, lock.detail());
  if (lock.outcome() == common::DirLock::Outcome::kUnsupported)
    std::cerr << fmt::format("shardtune: warning: {}: nothing keeps a second job out of {}\n", lock.detail(),
                             output_dir);
  return lock;
}

std::string holder_note(const std::string& what) {
  const std::time_t now = std::time(nullptr);
  return fmt::format("{} on {}, since {:%F %T}", what, common::this_process(), fmt::localtime(now));
}

}  // namespace shardtune::launcher
