// Resuming the job's checkpoints: the candidates, the fallback past damaged ones, the refusals.
#include "checkpoint/resume.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "checkpoint/adapter_base.h"
#include "checkpoint/commit.h"
#include "checkpoint/data_identity.h"
#include "common/error.h"
#include "common/file_io.h"
#include "runtime/dist/agree.h"
#include "runtime/dist/text_collectives.h"

namespace shardtune::checkpoint {
namespace {

// The newest commit number under the checkpoint directory when the run's first start began
// (resume_candidates), from its file; 0 without one (the directory was empty or absent then).
int64_t run_base(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return 0;
  const std::string text = common::read_file(path, common::ErrorKind::kIo, "the run's first commit number");
  try {
    size_t used = 0;
    const int64_t base = std::stoll(text, &used);
    if (base >= 0 && text.find_first_not_of(" \n", used) == std::string::npos) return base;
  } catch (const std::exception&) {
  }
  common::raise(common::ErrorKind::kIo, fmt::format("{}: not a commit number: {:?}", path, text.substr(0, 40)));
}

// The committed checkpoints of `dirs` (newest first) whose commit number is past `base`.
std::vector<std::string> checkpoints_after(const std::vector<std::string>& dirs, int64_t base) {
  std::vector<std::string> out;
  for (const std::string& dir : dirs) {
    try {
      const Manifest m = read_manifest(dir);
      if ((m.commit > 0 ? m.commit : m.step) > base) out.push_back(dir);
    } catch (const common::Error&) {
      out.push_back(dir);  // unreadable: the load says so, and falls back past it
    }
  }
  return out;
}

// Damage a checkpoint can have that an older one may not: worth falling back for.
bool is_damage(const common::Error& e) {
  return e.kind() == common::ErrorKind::kIo || e.kind() == common::ErrorKind::kHdf5;
}

}  // namespace

bool will_resume(const job::CheckpointSection& checkpoint, dist::Communicator& world, int64_t restart_count) {
  return !dist::decide_lines_on_root(world, [&] { return resume_candidates(checkpoint, restart_count); },
                                     "listing the checkpoints to resume")
              .empty();
}

std::vector<std::string> resume_candidates(const job::CheckpointSection& checkpoint, int64_t restart_count) {
  const std::vector<std::string> all = committed_checkpoints(checkpoint.dir);
  for (const std::string& dir : uncommitted_step_dirs(checkpoint.dir))
    spdlog::warn("{} has no manifest.json: not a committed checkpoint (a save cut short, or a lost manifest), so it "
                 "is not resumed; a save of its step sets it aside, never deletes it",
                 dir);
  if (checkpoint.resume == "auto") return all;
  // resume = "none" or a path says where the run begins: its first start. A requeue continues
  // from what the run itself committed since, and starts as the first did while it has nothing.
  const std::string base_file = checkpoint.dir + "/" + kRunBaseFile;
  if (restart_count == 0) {
    if (std::filesystem::is_directory(checkpoint.dir))
      common::write_file_atomically(base_file, fmt::format("{}\n", newest_position(checkpoint.dir).commit));
  } else {
    const std::vector<std::string> own = checkpoints_after(all, run_base(base_file));
    if (!own.empty()) {
      spdlog::info("requeued start {}: continuing from the run's own checkpoint {}, not from [checkpoint] resume = {}",
                   restart_count, own.front(), checkpoint.resume);
      return own;
    }
  }
  if (checkpoint.resume == "none") return {};
  return {checkpoint.resume};
}

std::vector<std::string> adapter_mismatches(const AdapterRecord& saved, const AdapterRecord& job) {
  std::vector<std::string> out;
  if (const std::optional<std::string> base = base_mismatch(saved, job))
    out.push_back(*base + ": adapters only resume on the base model they were trained on");
  auto base_kind = [](const AdapterRecord& a) {
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
void log_optimizer_state(const std::string& dir, const TrainingState& state, bool job_saves_optimizer) {
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
// other data is refused, or, with on_data_change = "new_schedule", starts this job's schedule from
// its first sample: step 0, the cursor at the start.
TrainingState load(const std::string& dir, const ResumeRequest& request, fsdp::FsdpLlama& model,
                   fsdp::Optimizer& optimizer, dist::Communicator& world) {
  const std::string changed = dist::decide_on_root(world, [&] {
    const Manifest manifest = read_manifest(dir);
    if (manifest.adapter && request.adapter) {
      const std::vector<std::string> problems = adapter_mismatches(*manifest.adapter, *request.adapter);
      ST_CHECK(problems.empty(), common::ErrorKind::kConfig, "cannot resume {}: {}", dir, fmt::join(problems, "; "));
    }
    const std::vector<std::string> changes = data_changes(manifest.data, request.data);
    if (changes.empty()) return std::string();
    ST_CHECK(request.checkpoint.on_data_change == job::OnDataChange::kNewSchedule, common::ErrorKind::kConfig,
             "cannot resume the checkpoint {}\nits sample cursor would train some samples of this data twice "
             "and others never. HINT: to go on with that run, restore the settings and data it was trained with; to "
             "train its weights on this data from the first sample, set [checkpoint] on_data_change = "
             "\"new_schedule\"; to start over, set [checkpoint] resume = \"none\"",
             data_change_text(dir, changes));
    return data_change_text(dir, changes);
  });
  optimizer.reset_state();  // an earlier attempt may have filled part of it
  TrainingState state = load_sharded_checkpoint(model, &optimizer, dir, world);
  const int64_t lowest = dist::min_over(world, state.step), highest = dist::max_over(world, state.step);
  ST_CHECK(lowest == highest, common::ErrorKind::kIo,
           "the ranks loaded different steps from {} ({} to {}): the checkpoint changed while they read it", dir,
           lowest, highest);
  spdlog::info("loaded checkpoint {}", dir);
  log_optimizer_state(dir, state, request.saves_optimizer);
  if (!changed.empty()) {
    spdlog::warn("{}\nits weights and optimizer state start a new schedule over this data ([checkpoint] "
                 "on_data_change = \"new_schedule\"): step 0, from the first sample, the learning rate schedule "
                 "from its start",
                 changed);
    state.step = state.epoch = state.sample_in_epoch = state.reference_batch = 0;
    state.validation_pending = false;
  }
  return state;
}

// A start resumes its own directory's newest loadable checkpoint; `latest` names it too, also when
// a crash came between a save's rename and its link (the checkpoint was committed, the link not
// moved) or a damaged newer one was set aside.
void repoint_latest(const std::string& root, const std::string& resumed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir(resumed);
  if (!fs::equivalent(dir.parent_path(), root, ec) || fs::equivalent(fs::path(root) / "latest", dir, ec)) return;
  if (std::optional<std::string> problem = point_latest_at(root, dir.filename().string()))
    spdlog::warn("{}", *problem);
  else
    spdlog::info("{}/latest now names {}, the checkpoint resumed", root, dir.filename().string());
}

}  // namespace

std::optional<TrainingState> resume(const ResumeRequest& request, fsdp::FsdpLlama& model, fsdp::Optimizer& optimizer,
                                    dist::Communicator& world) {
  const job::CheckpointSection& c = request.checkpoint;
  // World rank 0 lists: every rank must try the same checkpoints, even if the directory changes
  // while they look (a save of another job, a file system that lists lazily).
  const std::vector<std::string> candidates = dist::decide_lines_on_root(
      world, [&] { return resume_candidates(c, request.restart_count); }, "listing the checkpoints to resume");
  if (candidates.empty()) {
    if (c.resume == "none")
      spdlog::info("starting fresh: [checkpoint] resume = \"none\" (checkpoints under {} are not resumed)", c.dir);
    else
      spdlog::info("no checkpoint under {}: starting fresh", c.dir);
    return std::nullopt;
  }
  const bool fall_back = c.resume == "auto" || request.restart_count > 0;
  std::vector<std::string> skipped, why;
  for (const std::string& dir : candidates) {
    try {
      TrainingState state = load(dir, request, model, optimizer, world);
      if (world.rank() == 0) {
        set_aside(skipped);
        if (fall_back) repoint_latest(c.dir, dir);  // the newest that loads, not one the job names
      }
      return state;
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
                            candidates.size(), c.dir, fmt::join(why, "\n  ")));
}

}  // namespace shardtune::checkpoint
