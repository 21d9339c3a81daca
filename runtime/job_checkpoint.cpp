// Resuming and saving the job's checkpoints.
#include "runtime/job_checkpoint.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "checkpoint/commit.h"
#include "checkpoint/hf/peft_adapter.h"
#include "checkpoint/manifest.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/error.h"
#include "common/job/job_writer.h"
#include "common/job/schema.h"
#include "common/sha256.h"
#include "runtime/dist/text_collectives.h"
#include "runtime/job_model.h"
#include "runtime/model/lora.h"

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

std::optional<checkpoint::AdapterRecord> adapter_record(const job::Job& job, const std::string& model_config) {
  const std::optional<model::LoraSpec> spec = lora_spec(job);
  if (!spec) return std::nullopt;
  checkpoint::AdapterRecord r;
  r.r = spec->r;
  r.alpha = spec->alpha;
  r.dropout = spec->dropout;
  r.target_modules = spec->targets;
  r.base_path = job.model.path.empty() ? "preset:" + std::string(job::enum_name(job.model.preset)) : job.model.path;
  if (job.model.init == job::ModelInit::kPretrained) {
    const checkpoint::ModelIdentity id = checkpoint::model_identity(checkpoint::HfFolder::open(job.model.path));
    r.base_config_sha256 = id.config_sha256;
    r.base_tensors_sha256 = id.tensors_sha256;
    r.base_weights_sha256 = id.weights_sha256;
  } else {
    // A random base is its shape (the config) and its seed.
    r.base_config_sha256 = common::sha256_hex(model_config);
    r.base_tensors_sha256 = common::sha256_hex(fmt::format("random init, seed {}", job.train.seed));
    r.base_weights_sha256 = r.base_tensors_sha256;
  }
  return r;
}

std::vector<std::string> adapter_mismatches(const checkpoint::AdapterRecord& saved, const checkpoint::AdapterRecord& job) {
  std::vector<std::string> out;
  if (saved.base_config_sha256 != job.base_config_sha256 || saved.base_tensors_sha256 != job.base_tensors_sha256 ||
      saved.base_weights_sha256 != job.base_weights_sha256)
    out.push_back(fmt::format("its adapters were trained on the base model {} (SHA-256 of config.json {}, tensor "
                              "index {}, weights {}), but this job's base model is {} ({}, {}, {}): adapters only "
                              "resume on the base model they were trained on",
                              saved.base_path, saved.base_config_sha256.substr(0, 12),
                              saved.base_tensors_sha256.substr(0, 12), saved.base_weights_sha256.substr(0, 12),
                              job.base_path, job.base_config_sha256.substr(0, 12),
                              job.base_tensors_sha256.substr(0, 12), job.base_weights_sha256.substr(0, 12)));
  if (saved.r != job.r) out.push_back(fmt::format("its LoRA rank is {}, [peft] lora_r is {}", saved.r, job.r));
  if (saved.alpha != job.alpha)
    out.push_back(fmt::format("its lora_alpha is {}, [peft] lora_alpha is {}", saved.alpha, job.alpha));
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  if (sorted(saved.target_modules) != sorted(job.target_modules))
    out.push_back(fmt::format("its target modules are [{}], [peft] target_modules are [{}]",
                              fmt::join(saved.target_modules, ", "), fmt::join(job.target_modules, ", ")));
  return out;
}

train::CheckpointHooks checkpoint_hooks(const job::Job& job, const std::string& model_config, fsdp::FsdpLlama& model,
                                        dist::ProcessGroups& groups, int64_t restart_count) {
  // The adapters' base model, as world rank 0 sees it (the ranks that do not read weights never
  // open the model folder).
  std::optional<checkpoint::AdapterRecord> adapter;
  if (job.peft.method == job::PeftMethod::kLora) {
    std::string text;  // "" on failure, with the error after "E"
    if (groups.world->rank() == 0) {
      try {
        const checkpoint::AdapterRecord r = *adapter_record(job, model_config);
        text = fmt::format("R{}\n{}\n{}\n{}", r.base_config_sha256, r.base_tensors_sha256, r.base_weights_sha256,
                           r.base_path);
      } catch (const std::exception& e) {
        text = "E" + std::string(e.what());
      }
    }
    text = dist::broadcast_text(*groups.world, text);
    ST_CHECK(!text.empty() && text[0] == 'R', common::ErrorKind::kIo, "identifying the base model: {}",
             text.empty() ? "" : text.substr(1));
    checkpoint::AdapterRecord r;
    const std::optional<model::LoraSpec> spec = lora_spec(job);
    r.r = spec->r;
    r.alpha = spec->alpha;
    r.dropout = spec->dropout;
    r.target_modules = spec->targets;
    const size_t a = text.find('\n'), b = text.find('\n', a + 1), c = text.find('\n', b + 1);
    r.base_config_sha256 = text.substr(1, a - 1);
    r.base_tensors_sha256 = text.substr(a + 1, b - a - 1);
    r.base_weights_sha256 = text.substr(b + 1, c - b - 1);
    r.base_path = text.substr(c + 1);
    adapter = r;
  }
  train::CheckpointHooks hooks;
  hooks.resume = [&job, &model, &groups, restart_count,
                  adapter](fsdp::AdamW& optimizer) -> std::optional<train::ResumePoint> {
    dist::Communicator& world = *groups.world;
    // World rank 0 chooses: every rank must load the same checkpoint, even if the directory
    // changes while they look (a save of another job, a file system that lists lazily).
    std::string choice;  // "" fresh, "C<dir>", or "E<error>"
    if (world.rank() == 0) {
      try {
        const std::optional<std::string> dir = resume_checkpoint(job.checkpoint, restart_count);
        choice = dir ? "C" + *dir : "";
        // Adapters resume only on their own base model, with their own shape.
        if (dir) {
          const checkpoint::Manifest manifest = checkpoint::read_manifest(*dir);
          if (manifest.adapter && adapter) {
            const std::vector<std::string> problems = adapter_mismatches(*manifest.adapter, *adapter);
            ST_CHECK(problems.empty(), common::ErrorKind::kConfig, "cannot resume {}: {}", *dir,
                     fmt::format("{}", fmt::join(problems, "; ")));
          }
        }
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
  hooks.save = [&job, &model, &groups, model_config, adapter, job_toml = job::to_toml(job)](
                   fsdp::AdamW& optimizer, const train::ResumePoint& at) {
    const std::string dir = checkpoint::save_checkpoint(
        model, job.fsdp.save_optimizer ? &optimizer : nullptr,
        {at.step, at.epoch, at.sample_in_epoch, at.loss_scale, job_toml, model_config, adapter}, groups,
        job.checkpoint.dir, job.checkpoint.keep_last, job.fsdp.checkpoint_type == job::CheckpointType::kFull);
    spdlog::info("checkpoint committed: {}", dir);
  };
  return hooks;
}

}  // namespace shardtune::runtime
