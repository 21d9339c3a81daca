// Cross-field rules of the job file. Each error names every value involved.
#include "common/job/job_checks.h"

#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <system_error>
#include <utility>

#include "common/job/data_sources.h"
#include "common/job/no_effect.h"
#include "common/job/schema.h"
#include "common/job/slurm_time.h"
#include "common/prompt_template.h"
#include "common/shell_words.h"

namespace shardtune::job {
namespace {

class Checker {
 public:
  Checker(const FieldSources& sources, const std::string& file, Diagnostics& diags)
      : sources_(sources), file_(file), diags_(diags) {}

  // Reports at the position of the first of `keys` that the job file sets.
  void error(std::initializer_list<const char*> keys, const std::string& message) {
    diags_.error(where(keys), *keys.begin(), message);
  }
  void warning(std::initializer_list<const char*> keys, const std::string& message) {
    diags_.warning(where(keys), *keys.begin(), message);
  }
  // Whether the job file (or an override) gives `key` a value.
  bool is_set(const char* key) const { return sources_.count(key) != 0; }
  const FieldSources& sources() const { return sources_; }

 private:
  SourcePos where(std::initializer_list<const char*> keys) const {
    for (const char* k : keys)
      if (auto it = sources_.find(k); it != sources_.end()) return it->second;
    return SourcePos{file_, 0, 0};
  }

  const FieldSources& sources_;
  const std::string& file_;
  Diagnostics& diags_;
};

void check_model(const Job& job, Checker& c) {
  const bool has_path = !job.model.path.empty();
  const bool has_preset = job.model.preset != ModelPreset::kNone;
  if (has_path == has_preset) {
    c.error({"model.path", "model.preset"},
            has_path ? "give either path or preset, not both"
                     : "required: path (a Hugging Face model folder) or preset (e.g. \"tiny\")");
  }
  if (has_preset && job.model.init == ModelInit::kPretrained) {
    c.error({"model.init", "model.preset"},
            fmt::format("preset \"{}\" has no weights to load: set init = \"random\"", enum_name(job.model.preset)));
  }
}

void check_slurm(const Job& job, Checker& c) {
  const SlurmSection& s = job.slurm;
  if (s.gpus_per_node > 0 && s.ntasks_per_node > 0 && s.ntasks_per_node != s.gpus_per_node) {
    c.error({"slurm.ntasks_per_node", "slurm.gpus_per_node"},
            fmt::format("shardtune runs one rank per GPU: ntasks_per_node = {} but gpus_per_node = {}",
                        s.ntasks_per_node, s.gpus_per_node));
  }
  if (s.gpus_per_node > 0 && job.launch.device == Device::kCpu) {
    c.warning({"launch.device", "slurm.gpus_per_node"},
              fmt::format("device = \"cpu\" with gpus_per_node = {}: the job holds GPUs it does not use",
                          s.gpus_per_node));
  }
  if (s.min_nodes > s.nodes) {
    c.error({"slurm.min_nodes", "slurm.nodes"},
            fmt::format("min_nodes = {} is more than nodes = {}: the job could never start", s.min_nodes, s.nodes));
  }
  if (!s.time.empty()) {
    if (auto limit = parse_slurm_time(s.time); limit && !limit->unlimited && s.signal_lead_s >= limit->seconds) {
      c.error({"slurm.signal_lead_s", "slurm.time"},
              fmt::format("signal_lead_s = {} is not shorter than the time limit \"{}\" ({} s, as Slurm counts it)",
                          s.signal_lead_s, s.time, limit->seconds));
    }
  }
}

void check_fsdp(const Job& job, Checker& c) {
  if (job.fsdp.offload_params && !job.fsdp.cpu_offload)
    c.error({"fsdp.offload_params", "fsdp.cpu_offload"},
            "offload_params = true offloads the frozen shards as well as what cpu_offload offloads: it needs "
            "cpu_offload = true");
  const int64_t world = job.slurm.world_size();
  if (job.fsdp.sharding_strategy == ShardingStrategy::kHybridShard) {
    const int64_t shard = shard_group_size(job);
    if (world % shard != 0) {
      c.error({"fsdp.hsdp_shard_size", "fsdp.sharding_strategy"},
              fmt::format("HYBRID_SHARD needs a shard group size that divides the world size: shard group {} "
                          "vs world {} (nodes {} x ranks per node {})",
                          shard, world, job.slurm.nodes, job.slurm.ranks_per_node()));
    } else if (shard == world) {
      c.warning({"fsdp.hsdp_shard_size", "fsdp.sharding_strategy"},
                fmt::format("HYBRID_SHARD with one shard group of all {} ranks is FULL_SHARD", world));
    }
  }
}

void check_train(const Job& job, Checker& c) {
  const TrainSection& t = job.train;
  if (t.use_fp16 && t.pure_bf16) {
    c.error({"train.pure_bf16", "train.use_fp16"}, "use_fp16 and pure_bf16 cannot both be true: choose one precision");
  }
  if (t.use_fp16 && !t.mixed_precision) {
    c.error({"train.use_fp16", "train.mixed_precision"}, "use_fp16 = true needs mixed_precision = true");
  }
  if (t.use_fp16 && job.launch.device == Device::kCpu) {
    c.error({"train.use_fp16", "launch.device"},
            "use_fp16 = true needs a GPU, and [launch] device is \"cpu\": LibTorch has no fp16 matrix products on "
            "the CPU. HINT: leave use_fp16 false (mixed precision in bf16), or set mixed_precision = false");
  }
  if (t.lr_scheduler == LrScheduler::kCosine && t.max_train_step > 0 && t.warmup_steps >= t.max_train_step) {
    c.warning({"train.warmup_steps"}, fmt::format("warmup_steps = {} is not below max_train_step = {}",
                                                  t.warmup_steps, t.max_train_step));
  }
  if (t.freeze_layers && job.peft.method != PeftMethod::kNone) {
    c.error({"train.freeze_layers", "peft.method"},
            fmt::format("freeze_layers = true with [peft] method = \"{}\": LoRA freezes the whole base model already "
                        "and trains only the adapters; remove freeze_layers",
                        enum_name(job.peft.method)));
  }
}

// A key given a value of its own where another key makes it meaningless (no_effect.h): a warning
// naming both, so that nobody believes it took effect. A resolved job file spells out every key
// with its default, and the defaults that follow from other keys (profiler_dir from output_dir):
// those are not values of its own.
void check_no_effect(const Job& job, Checker& c) {
  Job defaults;
  defaults.job = job.job;
  resolve_defaults(defaults);
  for (const NoEffectRule& rule : no_effect_rules()) {
    if (!c.is_set(rule.key.c_str())) continue;
    const size_t dot = rule.key.find('.');
    const FieldSpec* field = find_field(rule.key.substr(0, dot), rule.key.substr(dot + 1));
    if (field->literal(job) == field->literal(defaults)) continue;
    // With several sources, [data]'s values are the sources' defaults (a source's own is checked
    // on the source: data_sources.h).
    const bool on_sources = !job.data_sources.empty() && rule.key.rfind("data.", 0) == 0;
    if (auto because = on_sources ? no_effect_on_sources(job, c.sources(), rule) : rule.because(job))
      c.warning({rule.key.c_str()}, fmt::format("{} = {} has no effect: {}", field->key, field->literal(job), *because));
  }
}

// Keys of `section` that another key makes unused: one given a value of its own is refused, saying
// why (`why(key)`). A resolved job file spells out every key with its default; those are not refused.
void refuse_unused_keys(const Job& job, Checker& c, const char* section, std::initializer_list<const char*> keys,
                        const char* because_key, const std::function<std::string(const FieldSpec&)>& why) {
  const Job defaults;
  for (const char* key : keys) {
    const FieldSpec* field = find_field(section, key);
    const std::string dotted = field->dotted();
    if (c.is_set(dotted.c_str()) && field->literal(job) != field->literal(defaults))
      c.error({dotted.c_str(), because_key}, why(*field));
  }
}

// [peft] keys the method ignores, saying why and which method uses them (`needs`).
void refuse_unused_peft_keys(const Job& job, Checker& c, std::initializer_list<const char*> keys, const std::string& why,
                             const char* needs) {
  refuse_unused_keys(job, c, "peft", keys, "peft.method", [&](const FieldSpec& field) {
    return fmt::format("{} = {} is set but [peft] method is \"{}\", {}: set method = \"{}\" or remove it", field.key,
                       field.literal(job), enum_name(job.peft.method), why, needs);
  });
}

// LoRA's keys mean nothing to a full fine-tune, the NF4 keys nothing without QLoRA.
void check_peft(const Job& job, Checker& c) {
  if (job.peft.method != PeftMethod::kQlora)
    refuse_unused_peft_keys(job, c, {"nf4_block_size", "nf4_double_quant"}, "whose base is not quantised", "qlora");
  if (job.peft.method == PeftMethod::kNone)
    refuse_unused_peft_keys(job, c, {"lora_r", "lora_alpha", "lora_dropout", "target_modules", "from_peft_checkpoint"},
                            "full fine-tuning, which would ignore it", "lora");
}

// Adafactor's keys mean nothing to another optimizer; a relative step replaces lr and its schedule.
void check_optimizer(const Job& job, Checker& c) {
  const TrainSection& t = job.train;
  if (t.optimizer != Optimizer::kAdafactor)
    refuse_unused_keys(job, c, "train",
                       {"adafactor_beta1", "adafactor_decay_rate", "adafactor_clip_threshold", "adafactor_eps",
                        "adafactor_eps_scale", "adafactor_scale_parameter", "adafactor_relative_step",
                        "adafactor_warmup_init"},
                       "train.optimizer", [&](const FieldSpec& field) {
                         return fmt::format("{} = {} is set but optimizer is \"{}\", which does not read it: set "
                                            "optimizer = \"adafactor\" or remove it",
                                            field.key, field.literal(job), enum_name(t.optimizer));
                       });
  if (t.adafactor_warmup_init && !t.adafactor_relative_step)
    c.error({"train.adafactor_warmup_init", "train.adafactor_relative_step"},
            "adafactor_warmup_init = true warms up the relative step: it needs adafactor_relative_step = true");
  if (t.optimizer == Optimizer::kAdafactor && t.adafactor_relative_step)
    refuse_unused_keys(job, c, "train", {"lr", "lr_scheduler", "gamma", "warmup_steps"},
                       "train.adafactor_relative_step", [&](const FieldSpec& field) {
                         return fmt::format("{} = {} is set, but adafactor_relative_step = true computes each step's "
                                            "size itself (min(1e-2, 1/sqrt(t))) and would ignore it: remove it, or "
                                            "set adafactor_relative_step = false",
                                            field.key, field.literal(job));
                       });
}

// DPO's keys need DPO, and DPO needs pairs; each reference needs what it reads.
void check_dpo(const Job& job, Checker& c) {
  const bool dpo = job.train.objective == Objective::kDpo;
  const bool pairs = job.data.format == DataFormat::kPreference;
  if (!dpo) {
    refuse_unused_keys(job, c, "dpo", {"beta", "loss_type", "label_smoothing", "reference", "reference_model"},
                       "train.objective", [&](const FieldSpec& field) {
                         return fmt::format("[dpo] {} = {} is set but [train] objective is \"sft\", which does not "
                                            "read it: set objective = \"dpo\" or remove it",
                                            field.key, field.literal(job));
                       });
    if (pairs)
      c.error({"data.format", "train.objective"},
              "format = \"preference\" holds pairs of answers, which only [train] objective = \"dpo\" trains on: "
              "set objective = \"dpo\" (or train the chosen answers with format = \"chat\" or \"jsonl\")");
    return;
  }
  if (!pairs)
    c.error({"train.objective", "data.format"},
            fmt::format("objective = \"dpo\" trains on preference pairs, and [data] format is \"{}\": set [data] "
                        "format = \"preference\" (records with prompt, chosen and rejected)",
                        enum_name(job.data.format)));
  if (pairs && job.train.batching_strategy != BatchingStrategy::kPadding)
    c.error({"train.batching_strategy", "data.format"},
            "preference pairs are batched pair by pair, each answer its own row padded to the longest of the "
            "micro-batch, never packed: set batching_strategy = \"padding\"");
  // In [data], and in a source that sets its own.
  const char* alone = "DPO compares the log-probabilities of the two answers alone: train_on = \"all\" would add the "
                      "prompt's; remove it";
  if (pairs && job.data.train_on == TrainOn::kAll) c.error({"data.train_on", "data.format"}, alone);
  for (size_t i = 0; pairs && i < job.data_sources.size(); ++i) {
    const std::string key = fmt::format("data.sources[{}].train_on", i + 1);
    if (job.data_sources[i].data.train_on == TrainOn::kAll && c.is_set(key.c_str())) c.error({key.c_str()}, alone);
  }
  const DpoSection& d = job.dpo;
  if (d.label_smoothing > 0 && d.loss_type != DpoLossType::kSigmoid)
    c.error({"dpo.label_smoothing", "dpo.loss_type"},
            fmt::format("label_smoothing = {} is the conservative DPO's, of loss_type = \"sigmoid\"; loss_type "
                        "\"{}\" would ignore it: remove it",
                        d.label_smoothing, enum_name(d.loss_type)));
  const DpoReference reference = dpo_reference(job);
  if (reference == DpoReference::kBase && !job.peft.adapters())
    c.error({"dpo.reference", "peft.method"},
            "reference = \"base\" is the model with its adapters switched off, and [peft] method is \"none\": "
            "a full fine-tune has no adapters. HINT: reference = \"model\" (a frozen copy of the starting "
            "weights) or \"precomputed\"");
  if (!d.reference_model.empty() && reference != DpoReference::kModel &&
      !(reference == DpoReference::kPrecomputed && !job.peft.adapters()))
    c.error({"dpo.reference_model", "dpo.reference"},
            fmt::format("reference_model = \"{}\" is the reference of a full fine-tune (reference = \"model\" or "
                        "\"precomputed\"), and reference is \"{}\"{}: remove it",
                        d.reference_model, enum_name(reference),
                        job.peft.adapters() ? " with adapters, whose reference is their base" : ""));
}

void check_metrics(const Job& job, Checker& c) {
  if (job.metrics.save_metrics && !job.metrics.jsonl)
    c.error({"metrics.save_metrics", "metrics.jsonl"},
            "save_metrics = true is made from metrics.jsonl, which jsonl = false turns off: set jsonl = true");
  if (job.metrics.sample_ids && !job.metrics.jsonl)
    c.error({"metrics.sample_ids", "metrics.jsonl"},
            "sample_ids = true is recorded in metrics.jsonl, which jsonl = false turns off: set jsonl = true");
  if (job.metrics.tensorboard && !job.metrics.jsonl)
    c.error({"metrics.tensorboard", "metrics.jsonl"},
            "tensorboard = true writes the records of metrics.jsonl, which jsonl = false turns off: set jsonl = true");
  const MetricsSection& m = job.metrics;
  // Counting FLOPs takes the profiler for its step; it cannot also be tracing then.
  const int64_t first = m.profiler_wait_steps + 1, last = m.profiler_wait_steps + m.profiler_warmup_steps + m.profiler_active_steps;
  const int64_t counted = m.flop_counter_start + 1;
  if (m.use_profiler && m.flop_counter && counted >= first && counted <= last)
    c.error({"metrics.flop_counter_start", "metrics.profiler_wait_steps"},
            fmt::format("the flop counter's step ({}) falls inside the profiled steps ({}..{}), and both need the "
                        "profiler to themselves: set flop_counter_start below {} or above {}",
                        counted, first, last, first - 1, last - 1));
}

// Files given to a job that reads none: the user meant a format and left it out.
void check_data_files(const Job& job, Checker& c) {
  if (job.data.format != DataFormat::kSynthetic) return;
  const bool format_given = c.is_set("data.format");
  for (const auto& [key, value] : {std::pair{"data.train_file", &job.data.train_file},
                                   std::pair{"data.val_file", &job.data.val_file},
                                   std::pair{"data.tokenizer", &job.data.tokenizer}}) {
    if (value->empty()) continue;
    const std::string name = std::string(key).substr(5);
    c.error({key}, format_given
                       ? fmt::format("{} = \"{}\" is set, but format = \"synthetic\" generates its tokens and reads no "
                                     "file: set the file's format (alpaca, samsum, grammar, jsonl, chat, preference) or remove {}",
                                     name, *value, name)
                       : fmt::format("{} = \"{}\" is set, but [data] format is not: without one the job trains on "
                                     "synthetic tokens and reads no file. HINT: set [data] format = \"alpaca\", "
                                     "\"samsum\", \"grammar\", \"jsonl\" or \"chat\"",
                                     name, *value));
  }
}

void check_data(const Job& job, Checker& c) {
  check_data_files(job, c);
  if (job.data.format == DataFormat::kSynthetic) return;
  if (job.data.train_file.empty() && job.data_sources.empty()) {
    c.error({"data.train_file", "data.format"},
            fmt::format("format \"{}\" needs train_file", enum_name(job.data.format)));
  }
  if (job.data.tokenizer.empty() && job.model.preset != ModelPreset::kNone) {
    c.error({"data.tokenizer", "data.format", "model.preset"},
            fmt::format("format \"{}\" needs a tokenizer, and preset \"{}\" has no tokenizer files: set [data] "
                        "tokenizer (a tokenizer.json or tokenizer.model)",
                        enum_name(job.data.format), enum_name(job.model.preset)));
  }
  if (!job.data.prompt_template.empty() && job.data_sources.empty()) {
    const common::ParsedTemplate parsed = common::parse_prompt_template(job.data.prompt_template);
    if (!parsed.error.empty()) c.error({"data.prompt_template"}, parsed.error);
  }
}

}  // namespace

void resolve_defaults(Job& job) {
  // From a valid name only: a bad name is reported once, as itself.
  if (job.job.output_dir.empty() && common::is_sbatch_path(job.job.name)) job.job.output_dir = "runs/" + job.job.name;
  if (job.checkpoint.dir.empty() && !job.job.output_dir.empty()) job.checkpoint.dir = job.job.output_dir + "/checkpoints";
  if (job.metrics.profiler_dir.empty() && !job.job.output_dir.empty())
    job.metrics.profiler_dir = job.job.output_dir + "/profiler";
  if (job.slurm.ntasks_per_node == 0) job.slurm.ntasks_per_node = job.slurm.ranks_per_node();
  if (job.fsdp.sharding_strategy == ShardingStrategy::kHybridShard && job.fsdp.hsdp_shard_size == 0)
    job.fsdp.hsdp_shard_size = job.slurm.ranks_per_node();
}

void check_job(const Job& job, const FieldSources& sources, const std::string& file, Diagnostics& diags) {
  Checker c(sources, file, diags);
  if (job.job.name.empty()) c.error({"job.name"}, "required: a name for the job, e.g. name = \"llama3-8b-sft\"");
  check_model(job, c);
  check_slurm(job, c);
  check_fsdp(job, c);
  check_train(job, c);
  check_optimizer(job, c);
  check_peft(job, c);
  check_dpo(job, c);
  check_no_effect(job, c);
  check_metrics(job, c);
  check_data(job, c);
}

void check_against_model(const Job& job, const ModelFacts& model, const FieldSources& sources, const std::string& file,
                         Diagnostics& diags) {
  Checker c(sources, file, diags);
  if (job.train.freeze_layers && job.train.num_freeze_layers > model.num_hidden_layers) {
    c.error({"train.num_freeze_layers", "train.freeze_layers"},
            fmt::format("num_freeze_layers = {} but the model has {} blocks (num_hidden_layers in {}): at most {}",
                        job.train.num_freeze_layers, model.num_hidden_layers, model.source, model.num_hidden_layers));
  }
  if (job.fsdp.activation_checkpointing && job.fsdp.uncheckpointed_blocks > model.num_hidden_layers) {
    c.error({"fsdp.uncheckpointed_blocks", "fsdp.activation_checkpointing"},
            fmt::format("uncheckpointed_blocks = {} but the model has {} blocks (num_hidden_layers in {}): at most {} "
                        "(all of them: the same as activation_checkpointing = false)",
                        job.fsdp.uncheckpointed_blocks, model.num_hidden_layers, model.source,
                        model.num_hidden_layers));
  }
}

void check_launch_paths(const Job& job, const FieldSources& sources, const std::string& file, Diagnostics& diags) {
  Checker c(sources, file, diags);
  const std::string& resume = job.checkpoint.resume;
  if (resume == "auto" || resume == "none" || resume.empty()) return;
  std::error_code ec;
  const std::filesystem::path dir(resume);
  if (!std::filesystem::is_directory(dir, ec)) {
    c.error({"checkpoint.resume"},
            fmt::format("resume = \"{}\": no such checkpoint folder ({}). HINT: \"auto\" resumes the newest "
                        "checkpoint under [checkpoint] dir, \"none\" starts fresh; a path names one checkpoint "
                        "(a step-NNNNNNN folder)",
                        resume, std::filesystem::absolute(dir, ec).lexically_normal().string()));
  } else if (!std::filesystem::is_regular_file(dir / "manifest.json", ec)) {
    c.error({"checkpoint.resume"},
            fmt::format("resume = \"{}\" is a folder without a manifest.json: not a committed checkpoint. HINT: "
                        "name a step-NNNNNNN folder under a job's checkpoints/, or \"auto\"",
                        resume));
  }
}

}  // namespace shardtune::job
