// Resuming and saving the job's checkpoints.
#include "rank/job_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "checkpoint/adapter_base.h"
#include "checkpoint/background_save.h"
#include "checkpoint/checkpoint_save.h"
#include "checkpoint/commit.h"
#include "checkpoint/data_identity.h"
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
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Damage a checkpoint can have that an older one may not: worth falling back for.
bool is_damage(const common::Error& e) {
  return e.kind() == common::ErrorKind::kIo || e.kind() == common::ErrorKind::kHdf5;
}

}  // namespace

bool will_resume(const job::Job& job, dist::Communicator& world, int64_t restart_count) {
  return !dist::decide_on_root(
              world, [&] { return fmt::format("{}", fmt::join(resume_candidates(job.checkpoint, restart_count), "\n")); },
              "listing the checkpoints to resume")
              .empty();
}

std::vector<std::string> resume_candidates(const job::CheckpointSection& checkpoint, int64_t restart_count) {
  if (checkpoint.resume == "none") return {};
  std::vector<std::string> own = checkpoint::committed_checkpoints(checkpoint.dir);
  for (const std::string& dir : checkpoint::uncommitted_step_dirs(checkpoint.dir))
    spdlog::warn("{} has no manifest.json: not a committed checkpoint (a save cut short, or a lost manifest), so it "
                 "is not resumed; a save of its step sets it aside, never deletes it",
                 dir);
  if (checkpoint.resume == "auto") return own;
  if (restart_count > 0 && !own.empty()) {
    spdlog::info("requeued start {}: continuing from the job's own checkpoint {}, not from [checkpoint] resume = {}",
                 restart_count, own.front(), checkpoint.resume);
    return own;
  }
  return {checkpoint.resume};
}

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
  const std::vector<std::string> hashes = lines_of(dist::decide_on_root(world, [&] {
    if (job.model.init != job::ModelInit::kPretrained) {
      // A random base is its shape (the config) and its seed.
      const std::string seed = common::sha256_hex(fmt::format("random init, seed {}", job.train.seed));
      return fmt::format("{}\n{}\n{}\n{}\n", common::sha256_hex(model_config), seed, seed, seed);
    }
    const checkpoint::ModelIdentity id =
        checkpoint::model_identity(checkpoint::HfFolder::open(job.model.path), weights_sha256);
    return fmt::format("{}\n{}\n{}\n{}\n", id.config_sha256, id.tensors_sha256, id.weights_sha256,
                       id.weights_sample_sha256);
  }, "identifying the base model (hashing its weights)"));
  ST_CHECK(hashes.size() == 4, common::ErrorKind::kInternal, "the base model's identity has {} parts", hashes.size());
  r.base_config_sha256 = hashes[0];
  r.base_tensors_sha256 = hashes[1];
  r.base_weights_sha256 = hashes[2];
  r.base_weights_sample_sha256 = hashes[3];
  return r;
}

std::vector<std::string> adapter_mismatches(const checkpoint::AdapterRecord& saved, const checkpoint::AdapterRecord& job) {
  std::vector<std::string> out;
  if (const std::optional<std::string> base = checkpoint::base_mismatch(saved, job))
    out.push_back(*base + ": adapters only resume on the base model they were trained on");
  auto base_kind = [](const checkpoint::AdapterRecord& a) {
    return a.method == "qlora" ? fmt::format("an NF4 base (qlora, blocks of {}, {})", a.nf4_block_size,
                                             a.nf4_double_quant ? "double-quantised scales" : "fp32 scales")
                               : std::string("an unquantised base (lora)");
  };
  if (base_kind(saved) != base_kind(job))
    out.push_back(fmt::format("its adapters were trained on {}, this job has {}: [peft] method, nf4_block_size and "
                              "nf4_double_quant must be the checkpoint's",
                              base_kind(saved), base_kind(job)));
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

namespace {

// Damaged checkpoints that an older one stood in for are renamed out of the way (<dir>.damaged-<time>),
// never deleted: a later start does not try them again, a rerun's save of the same step does not
// replace them, pruning does not count them, and they stay for inspection. Only when an older one
// loaded: if none does, nothing is touched and the user decides.
void set_aside(const std::vector<std::string>& damaged) {
  for (const std::string& dir : damaged) {
    const std::string aside = fmt::format("{}.damaged-{}", dir, std::time(nullptr));
    std::error_code ec;
    std::filesystem::rename(dir, aside, ec);
    if (ec) {
      spdlog::warn("could not set the damaged checkpoint {} aside: {}", dir, ec.message());
    } else {
      spdlog::warn("the damaged checkpoint {} is kept as {} for inspection (shardtune-ckpt verify {})", dir, aside,
                   aside);
    }
  }
}

// "model.layers.0.* (9 tensors), model.layers.1.* (9 tensors)": tensor names grouped by block.
std::string by_block(const std::vector<std::string>& names) {
  constexpr std::string_view kLayers = "model.layers.";
  std::vector<std::pair<std::string, int>> groups;
  for (const std::string& name : names) {
    const size_t dot = name.rfind(kLayers, 0) == 0 ? name.find('.', kLayers.size()) : std::string::npos;
    const std::string block = dot == std::string::npos ? name : name.substr(0, dot) + ".*";
    if (groups.empty() || groups.back().first != block) groups.emplace_back(block, 0);
    ++groups.back().second;
  }
  std::vector<std::string> parts;
  for (const auto& [block, n] : groups) parts.push_back(n > 1 ? fmt::format("{} ({} tensors)", block, n) : block);
  return fmt::format("{}", fmt::join(parts, ", "));
}

// What a resume did with AdamW's state: a checkpoint saved without it, or layers frozen or
// unfrozen since it was saved.
void log_optimizer_state(const std::string& dir, const checkpoint::TrainingState& state, bool job_saves_optimizer) {
  if (!state.has_optimizer && job_saves_optimizer)
    spdlog::warn("{} holds no optimizer state ([fsdp] save_optimizer was false when it was saved): AdamW starts "
                 "fresh, its moments at zero",
                 dir);
  if (!state.fresh_moments.empty())
    spdlog::info("optimizer state starts fresh for {} tensor(s) that were frozen when {} was saved: {}",
                 state.fresh_moments.size(), dir, by_block(state.fresh_moments));
  if (!state.unused_moments.empty())
    spdlog::info("{} tensor(s) are frozen now: their optimizer state in {} is not used: {}", state.unused_moments.size(),
                 dir, by_block(state.unused_moments));
}

// What differs between a checkpoint's data and the job's, as one error or, with on_data_change =
// "new_schedule", as the warning of a new schedule; empty when nothing does.
std::string data_change_text(const std::string& dir, const std::vector<std::string>& changes) {
  return fmt::format("{} was trained on other data or in another order than this job's:\n  {}", dir,
                     fmt::join(changes, "\n  "));
}

// Loads checkpoint `dir` into every rank, or throws the same error on every rank. A checkpoint of
// other data (`data`) is refused, or, with on_data_change = "new_schedule", starts this job's
// schedule from its first sample: step 0, the cursor at the start.
train::ResumePoint load(const std::string& dir, fsdp::FsdpLlama& model, fsdp::AdamW& optimizer,
                        dist::Communicator& world, const std::optional<checkpoint::AdapterRecord>& adapter,
                        const checkpoint::DataIdentity& data, const job::Job& job) {
  const std::string changed = dist::decide_on_root(world, [&] {
    const checkpoint::Manifest manifest = checkpoint::read_manifest(dir);
    if (manifest.adapter && adapter) {
      const std::vector<std::string> problems = adapter_mismatches(*manifest.adapter, *adapter);
      ST_CHECK(problems.empty(), common::ErrorKind::kConfig, "cannot resume {}: {}", dir, fmt::join(problems, "; "));
    }
    const std::vector<std::string> changes = checkpoint::data_changes(manifest.data, data);
    if (changes.empty()) return std::string();
    ST_CHECK(job.checkpoint.on_data_change == job::OnDataChange::kNewSchedule, common::ErrorKind::kConfig,
             "cannot resume the checkpoint {}\nits sample cursor would train some samples of this data twice "
             "and others never. HINT: to go on with that run, restore the settings and data it was trained with; to "
             "train its weights on this data from the first sample, set [checkpoint] on_data_change = "
             "\"new_schedule\"; to start over, set [checkpoint] resume = \"none\"",
             data_change_text(dir, changes));
    return data_change_text(dir, changes);
  });
  optimizer.reset_state();  // an earlier attempt may have filled part of it
  const checkpoint::TrainingState state = checkpoint::load_sharded_checkpoint(model, &optimizer, dir, world);
  const int64_t lowest = dist::min_over(world, state.step), highest = dist::max_over(world, state.step);
  ST_CHECK(lowest == highest, common::ErrorKind::kIo,
           "the ranks loaded different steps from {} ({} to {}): the checkpoint changed while they read it", dir,
           lowest, highest);
  spdlog::info("loaded checkpoint {}", dir);
  log_optimizer_state(dir, state, job.fsdp.save_optimizer);
  if (!changed.empty()) {
    spdlog::warn("{}\nits weights and optimizer state start a new schedule over this data ([checkpoint] "
                 "on_data_change = \"new_schedule\"): step 0, from the first sample, the learning rate schedule "
                 "from its start",
                 changed);
    return {0, {0, 0}, state.loss_scale, 0, false};
  }
  return {state.step, {state.epoch, state.sample_in_epoch}, state.loss_scale, state.reference_batch,
          state.validation_pending};
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

// The resume hook: the checkpoint every rank loads, newest first, falling back past damaged ones.
std::optional<train::ResumePoint> resume_job(const job::Job& job, fsdp::FsdpLlama& model, dist::ProcessGroups& groups,
                                             int64_t restart_count,
                                             const std::optional<checkpoint::AdapterRecord>& adapter,
                                             const checkpoint::DataIdentity& data, fsdp::AdamW& optimizer) {
  dist::Communicator& world = *groups.world;
  // World rank 0 lists: every rank must try the same checkpoints, even if the directory changes
  // while they look (a save of another job, a file system that lists lazily).
  const std::vector<std::string> candidates = lines_of(dist::decide_on_root(world, [&] {
    return fmt::format("{}", fmt::join(resume_candidates(job.checkpoint, restart_count), "\n"));
  }));
  if (candidates.empty()) {
    if (job.checkpoint.resume == "none")
      spdlog::info("starting fresh: [checkpoint] resume = \"none\" (checkpoints under {} are not resumed)",
                   job.checkpoint.dir);
    else
      spdlog::info("no checkpoint under {}: starting fresh", job.checkpoint.dir);
    return std::nullopt;
  }
  const bool fall_back = job.checkpoint.resume == "auto" || restart_count > 0;
  std::vector<std::string> skipped, why;
  for (const std::string& dir : candidates) {
    try {
      const train::ResumePoint at = load(dir, model, optimizer, world, adapter, data, job);
      if (world.rank() == 0) set_aside(skipped);
      return at;
    } catch (const common::Error& e) {
      if (!fall_back || !is_damage(e)) throw;
      skipped.push_back(dir);
      why.push_back(fmt::format("{}: {}", dir, e.what()));
      spdlog::warn("skipping checkpoint {}: it does not load ({}); trying the next older one", dir, e.what());
    }
  }
  common::raise(common::ErrorKind::kIo,
                fmt::format("none of the {} checkpoint(s) under {} loads, so the job cannot resume; nothing was "
                            "deleted. HINT: check them with shardtune-ckpt verify, or start over with [checkpoint] "
                            "resume = \"none\":\n  {}",
                            candidates.size(), job.checkpoint.dir, fmt::join(why, "\n  ")));
}

}  // namespace

train::CheckpointHooks checkpoint_hooks(const job::Job& job, const std::string& model_config, fsdp::FsdpLlama& model,
                                        dist::ProcessGroups& groups, int64_t restart_count,
                                        std::optional<checkpoint::AdapterRecord> adapter,
                                        checkpoint::DataIdentity data) {
  train::CheckpointHooks hooks;
  hooks.resume = [&job, &model, &groups, restart_count, adapter, data](fsdp::AdamW& optimizer) {
    return resume_job(job, model, groups, restart_count, adapter, data, optimizer);
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
  if (sharded && !split) hooks.watch_update = [&model, crcs](fsdp::AdamW& optimizer) { return crcs->watch(model, optimizer); };
  hooks.save = [&job, &model, &groups, state_at, pruner, crcs](fsdp::AdamW& optimizer, const train::ResumePoint& at) {
    const Timer timer;
    // Pruning runs beside training, outside any collective; the ranks waiting in the save's first
    // collective meanwhile hear that rank 0 is busy with it.
    dist::while_busy("pruning older checkpoints", [&] { pruner->wait(); });
    checkpoint::CheckpointSave save(model, job.fsdp.save_optimizer ? &optimizer : nullptr, state_at(at), groups,
                                    job.checkpoint.dir, job.checkpoint.keep_last,
                                    job.fsdp.checkpoint_type == job::CheckpointType::kFull, crcs.get(),
                                    job.checkpoint.fully_parallel);
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
                         fsdp::AdamW& optimizer, const train::ResumePoint& at) -> std::unique_ptr<train::SaveInFlight> {
    const Timer timer;
    dist::while_busy("pruning older checkpoints", [&] { pruner->wait(); });
    auto save = std::make_unique<checkpoint::CheckpointSave>(
        model, job.fsdp.save_optimizer ? &optimizer : nullptr, state_at(at), groups, job.checkpoint.dir,
        job.checkpoint.keep_last, job.fsdp.checkpoint_type == job::CheckpointType::kFull, crcs.get(),
        job.checkpoint.fully_parallel);
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
