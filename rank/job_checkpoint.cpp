// Resuming and saving the job's checkpoints.
#include "rank/job_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "checkpoint/adapter_base.h"
#include "checkpoint/background_save.h"
#include "checkpoint/checkpoint_save.h"
#include "checkpoint/commit.h"
#include "checkpoint/resume.h"
#include "checkpoint/hf/model_identity.h"
#include "checkpoint/manifest.h"
#include "checkpoint/sharded_checkpoint.h"
#include "checkpoint/update_crcs.h"
#include "common/error.h"
#include "common/job/job_writer.h"
#include "common/job/schema.h"
#include "common/sha256.h"
#include "runtime/dist/agree.h"
#include "runtime/dist/busy.h"
#include "runtime/dist/text_collectives.h"
#include "rank/job_model.h"
#include "runtime/model/lora.h"

namespace shardtune::rank_program {

std::optional<checkpoint::AdapterRecord> adapter_record(const job::Job& job, const std::string& model_config,
                                                        dist::Communicator& world, const std::string& weights_sha256) {
  const std::optional<model::LoraSpec> spec = lora_spec(job);
  if (!spec) return std::nullopt;
  checkpoint::AdapterRecord r;
  if (job.peft.method == job::PeftMethod::kQlora) {
    r.method = "qlora";
    r.nf4_block_size = job.peft.nf4_block_size;
    r.nf4_double_quant = job.peft.nf4_double_quant;
  }
  r.r = spec->r;
  r.alpha = spec->alpha;
  r.dropout = spec->dropout;
  r.target_modules = spec->targets;
  r.base_path = job.model.path.empty() ? "preset:" + std::string(job::enum_name(job.model.preset)) : job.model.path;
  // The ranks that do not read weights never open the model folder: world rank 0 identifies it.
  const std::vector<std::string> hashes = dist::decide_lines_on_root(world, [&]() -> std::vector<std::string> {
    if (job.model.init != job::ModelInit::kPretrained) {
      // A random base is its shape (the config) and its seed.
      const std::string seed = common::sha256_hex(fmt::format("random init, seed {}", job.train.seed));
      return {common::sha256_hex(model_config), seed, seed, seed};
    }
    const checkpoint::ModelIdentity id =
        checkpoint::model_identity(checkpoint::HfFolder::open(job.model.path), weights_sha256);
    return {id.config_sha256, id.tensors_sha256, id.weights_sha256, id.weights_sample_sha256};
  }, "identifying the base model (hashing its weights)");
  ST_CHECK(hashes.size() == 4, common::ErrorKind::kInternal, "the base model's identity has {} parts", hashes.size());
  r.base_config_sha256 = hashes[0];
  r.base_tensors_sha256 = hashes[1];
  r.base_weights_sha256 = hashes[2];
  r.base_weights_sample_sha256 = hashes[3];
  return r;
}

namespace {

// Where and how the job saves (`taken`: checksums taken during the update).
checkpoint::SaveRequest save_request(const job::Job& job, checkpoint::UpdateCrcs* taken) {
  return {job.checkpoint.dir, job.checkpoint.keep_last, job.fsdp.checkpoint_type == job::CheckpointType::kFull,
          job.checkpoint.fully_parallel, taken};
}

struct Timer {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

// What a save's log line says of checksums taken during the update (the time they took there, on
// the training thread, belongs to the save).
std::string taken_note(const checkpoint::UpdateCrcs& crcs) {
  return crcs.used() == 0 ? std::string()
                          : fmt::format("; {} tensors' checksums taken during the update in {:.3f} s", crcs.used(),
                                        crcs.seconds());
}

// A save written on its own thread ([checkpoint] async), as the training loop sees it.
class SaveInBackground final : public train::SaveInFlight {
 public:
  SaveInBackground(std::unique_ptr<checkpoint::CheckpointSave> save, std::shared_ptr<std::vector<at::Tensor>> buffers,
                   std::shared_ptr<checkpoint::Pruner> pruner, dist::Communicator& world)
      : buffers_(std::move(buffers)), pruner_(std::move(pruner)), world_(world), save_(std::move(save), *buffers_) {}
  int64_t step() const override { return save_.step(); }
  void wait_for_copy() override { save_.wait_for_copy(); }
  bool written() override { return save_.written(world_); }
  void commit() override {
    const Timer timer;
    const std::string dir = save_.commit(*pruner_);
    const checkpoint::BackgroundSave::Times t = save_.times();
    spdlog::info("checkpoint committed: {} (written in the background; committed in {:.3f} s). This rank's part: "
                 "copied in {:.3f} s ({:.3f} s of CPU), written in {:.3f} s ({:.3f} s of CPU)",
                 dir, timer.seconds(), t.copy, t.copy_cpu, t.write, t.write_cpu);
  }

 private:
  std::shared_ptr<std::vector<at::Tensor>> buffers_;  // outlives save_
  std::shared_ptr<checkpoint::Pruner> pruner_;
  dist::Communicator& world_;
  checkpoint::BackgroundSave save_;
};

}  // namespace

train::CheckpointHooks checkpoint_hooks(const job::Job& job, const std::string& model_config, fsdp::FsdpLlama& model,
                                        dist::ProcessGroups& groups, int64_t restart_count,
                                        std::optional<checkpoint::AdapterRecord> adapter,
                                        data::DataIdentity data) {
  train::CheckpointHooks hooks;
  const checkpoint::ResumeRequest request{job.checkpoint, restart_count, job.fsdp.save_optimizer, adapter, data};
  hooks.resume = [&model, &groups, request](fsdp::Optimizer& optimizer) -> std::optional<train::ResumePoint> {
    const std::optional<checkpoint::TrainingState> s = checkpoint::resume(request, model, optimizer, *groups.world);
    if (!s) return std::nullopt;
    return train::ResumePoint{s->step, {s->epoch, s->sample_in_epoch}, s->loss_scale, s->reference_batch,
                              s->validation_pending};
  };
  // What a checkpoint of step `at` records besides the tensors.
  auto state_at = [model_config, adapter, data, job_toml = job::to_toml(job)](const train::ResumePoint& at) {
    checkpoint::TrainingState s;
    s.step = at.step;
    s.epoch = at.cursor.epoch;
    s.sample_in_epoch = at.cursor.sample;
    s.loss_scale = at.loss_scale;
    s.reference_batch = at.reference_batch;
    s.validation_pending = at.validation_pending;
    s.job_toml = job_toml;
    s.model_config = model_config;
    s.adapter = adapter;
    s.data = data;
    return s;
  };
  // Pruning after a background save runs on a thread (world rank 0); any later save waits for it.
  auto pruner = std::make_shared<checkpoint::Pruner>();
  // A sharded save's checksums are taken during the update of the step it follows (not where
  // replicas write parts of their shards: the checksums of whole shards fit none of them).
  const bool sharded = job.fsdp.checkpoint_type != job::CheckpointType::kFull;
  const bool split = job.checkpoint.fully_parallel && groups.replicate->size() > 1;
  auto crcs = std::make_shared<checkpoint::UpdateCrcs>();
  if (sharded && !split) hooks.watch_update = [&model, crcs](fsdp::Optimizer& optimizer) { return crcs->watch(model, optimizer); };
  hooks.save = [&job, &model, &groups, state_at, pruner, crcs](fsdp::Optimizer& optimizer, const train::ResumePoint& at) {
    const Timer timer;
    // Pruning runs beside training, outside any collective; the ranks waiting in the save's first
    // collective meanwhile hear that rank 0 is busy with it.
    dist::while_busy("pruning older checkpoints", [&] { pruner->wait(); });
    checkpoint::CheckpointSave save(model, job.fsdp.save_optimizer ? &optimizer : nullptr, state_at(at), groups,
                                    save_request(job, crcs.get()));
    if (save.writes_alone())
      dist::while_busy(fmt::format("writing its files of checkpoint step {}", at.step), [&] { save.write(); });
    else
      save.write();
    const std::string dir = save.commit(pruner.get());
    spdlog::info("checkpoint committed: {} (saved in {:.3f} s{})", dir, timer.seconds(), taken_note(*crcs));
  };
  if (!job.checkpoint.async) return hooks;
  // The host copies of one save are kept for the next.
  auto buffers = std::make_shared<std::vector<at::Tensor>>();
  hooks.start_save = [&job, &model, &groups, state_at, buffers, pruner, crcs](
                         fsdp::Optimizer& optimizer, const train::ResumePoint& at) -> std::unique_ptr<train::SaveInFlight> {
    const Timer timer;
    dist::while_busy("pruning older checkpoints", [&] { pruner->wait(); });
    auto save = std::make_unique<checkpoint::CheckpointSave>(
        model, job.fsdp.save_optimizer ? &optimizer : nullptr, state_at(at), groups, save_request(job, crcs.get()));
    if (!save->writes_alone()) {
      static bool said = false;  // once a run
      if (!std::exchange(said, true))
        spdlog::info("[checkpoint] async: full checkpoints gathered to rank 0 are written in the foreground");
      save->write();
      const std::string dir = save->commit();
      spdlog::info("checkpoint committed: {} (saved in {:.3f} s)", dir, timer.seconds());
      return nullptr;
    }
    spdlog::info("checkpoint of step {}: begun in {:.3f} s; this rank's state ({:.1f} MiB, {} bytes) is {} in the "
                 "background{}",
                 at.step, timer.seconds(), static_cast<double>(save->host_bytes()) / (1 << 20), save->host_bytes(),
                 save->copies_to_host() ? "copied to host memory and written"
                                        : "written (the next optimizer update waits until it is read)",
                 taken_note(*crcs));
    return std::make_unique<SaveInBackground>(std::move(save), buffers, pruner, *groups.world);
  };
  return hooks;
}

}  // namespace shardtune::rank_program
