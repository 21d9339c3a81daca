// Resuming and saving the job's checkpoints.
#include "runtime/job_checkpoint.h"

#include <spdlog/spdlog.h>

#include "checkpoint/commit.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/error.h"
#include "common/job/job_writer.h"
#include "runtime/dist/text_collectives.h"

namespace shardtune::runtime {

std::optional<std::string> resume_checkpoint(const job::CheckpointSection& checkpoint, int64_t restart_count) {
  if (checkpoint.resume == "none") return std::nullopt;
  const std::optional<std::string> own = checkpoint::find_latest_checkpoint(checkpoint.dir);
  if (checkpoint.resume == "auto") return own;
  if (restart_count > 0 && own) {
    spdlog::info("requeued start {}: continuing from the job's own checkpoint {}, not from [checkpoint] resume = {}",
                 restart_count, *own, checkpoint.resume);
    return own;
  }
  return checkpoint.resume;
}

train::CheckpointHooks checkpoint_hooks(const job::Job& job, const std::string& model_config, fsdp::FsdpLlama& model,
                                        dist::ProcessGroups& groups, int64_t restart_count) {
  train::CheckpointHooks hooks;
  hooks.resume = [&job, &model, &groups, restart_count](fsdp::AdamW& optimizer) -> std::optional<train::ResumePoint> {
    dist::Communicator& world = *groups.world;
    // World rank 0 chooses: every rank must load the same checkpoint, even if the directory
    // changes while they look (a save of another job, a file system that lists lazily).
    std::string choice;  // "" fresh, "C<dir>", or "E<error>"
    if (world.rank() == 0) {
      try {
        const std::optional<std::string> dir = resume_checkpoint(job.checkpoint, restart_count);
        choice = dir ? "C" + *dir : "";
      } catch (const std::exception& e) {
        choice = "E" + std::string(e.what());
      }
    }
    choice = dist::broadcast_text(world, choice);
    ST_CHECK(choice.empty() || choice[0] != 'E', common::ErrorKind::kIo, "choosing the checkpoint to resume: {}",
             choice.empty() ? "" : choice.substr(1));
    if (choice.empty()) {
      spdlog::info("no checkpoint under {}: starting fresh", job.checkpoint.dir);
      return std::nullopt;
    }
    const std::string dir = choice.substr(1);
    const checkpoint::TrainingState state = checkpoint::load_sharded_checkpoint(model, &optimizer, dir, world);
    const int64_t lowest = dist::min_over(world, state.step), highest = dist::max_over(world, state.step);
    ST_CHECK(lowest == highest, common::ErrorKind::kIo,
             "the ranks loaded different steps from {} ({} to {}): the checkpoint changed while they read it", dir,
             lowest, highest);
    spdlog::info("loaded checkpoint {}", dir);
    return train::ResumePoint{state.step, state.epoch, state.sample_in_epoch, state.loss_scale};
  };
  hooks.save = [&job, &model, &groups, model_config, job_toml = job::to_toml(job)](fsdp::AdamW& optimizer,
                                                                                   const train::ResumePoint& at) {
    const std::string dir = checkpoint::save_checkpoint(
        model, job.fsdp.save_optimizer ? &optimizer : nullptr,
        {at.step, at.epoch, at.sample_in_epoch, at.loss_scale, job_toml, model_config}, groups, job.checkpoint.dir,
        job.checkpoint.keep_last, job.fsdp.checkpoint_type == job::CheckpointType::kFull);
    spdlog::info("checkpoint committed: {}", dir);
  };
  return hooks;
}

}  // namespace shardtune::runtime
