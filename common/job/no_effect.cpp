// The rules of keys without effect.
#include "common/job/no_effect.h"

#include <fmt/format.h>

#include "common/job/schema.h"
#include "common/job/slurm_time.h"

namespace shardtune::job {
namespace {

using Because = std::optional<std::string>;

bool synthetic(const Job& j) { return j.data.format == DataFormat::kSynthetic; }

Because if_synthetic(const Job& j) {
  if (!synthetic(j)) return std::nullopt;
  return std::string("[data] format is \"synthetic\": generated tokens, no records");
}

// The fields a record format reads, for the jsonl-only keys.
Because unless_jsonl(const Job& j) {
  switch (j.data.format) {
    case DataFormat::kJsonl: return std::nullopt;
    case DataFormat::kAlpaca: return std::string("format is \"alpaca\", whose fields are instruction, input and output");
    case DataFormat::kSamsum: return std::string("format is \"samsum\", whose fields are dialogue and summary");
    case DataFormat::kGrammar: return std::string("format is \"grammar\", whose fields are input and target");
    case DataFormat::kChat: return std::string("format is \"chat\", whose records are conversations");
    case DataFormat::kPreference: return std::string("format is \"preference\", whose fields are prompt, chosen and rejected");
    case DataFormat::kSynthetic: return if_synthetic(j);
  }
  return std::nullopt;
}

bool weights_made_in_place(const Job& j) { return j.model.preset != ModelPreset::kNone || j.model.init == ModelInit::kRandom; }

Because if_weights_made_in_place(const Job& j) {
  if (!weights_made_in_place(j)) return std::nullopt;
  return std::string(j.model.preset != ModelPreset::kNone ? "[model] preset has no weights to read"
                                                          : "[model] init is \"random\": no weights are read");
}

Because when(bool condition, const char* because) {
  if (!condition) return std::nullopt;
  return std::string(because);
}

std::vector<NoEffectRule> build_rules() {
  std::vector<NoEffectRule> r;
  auto add = [&r](const char* key, const char* condition, std::function<Because(const Job&)> because) {
    r.push_back({key, condition, std::move(because)});
  };
  // [slurm]
  add("slurm.min_nodes", "`min_nodes` equals `nodes`", [](const Job& j) {
    return when(j.slurm.min_nodes == j.slurm.nodes, "it equals nodes: the job runs on exactly that many, as with 0");
  });
  add("slurm.mail_user", "`mail_type` is empty", [](const Job& j) {
    return when(j.slurm.mail_type.empty(), "mail_type is empty, so Slurm sends no e-mail (e.g. mail_type = \"END,FAIL\")");
  });
  add("slurm.signal_lead_s", "`time` asks for no limit", [](const Job& j) -> Because {
    const auto limit = parse_slurm_time(j.slurm.time);
    if (j.slurm.time.empty() || !limit || !limit->unlimited) return std::nullopt;
    return fmt::format("time = \"{}\" asks for no time limit, so Slurm sends no time-limit signal (a preemption "
                       "or scancel still stops the job)",
                       j.slurm.time);
  });
  // [launch]
  for (const char* key : {"launch.srun_mpi", "launch.extra_srun_options"})
    add(key, "`launcher = \"mpirun\"`", [](const Job& j) {
      return when(j.launch.launcher == Launcher::kMpirun, "launcher is \"mpirun\", and these are srun's");
    });
  add("launch.extra_mpirun_options", "`launcher = \"srun\"` (they still reach `shardtune run`)", [](const Job& j) {
    return when(j.launch.launcher == Launcher::kSrun,
                "launcher is \"srun\": a submitted job starts its ranks with srun (only `shardtune run` passes them "
                "to mpirun)");
  });
  add("launch.gpu_memory_gib", "`device = \"cpu\"`", [](const Job& j) {
    return when(j.launch.device == Device::kCpu, "device is \"cpu\" (the planner checks GPU memory)");
  });
  // [data]
  add("data.val_fraction", "synthetic data, a `val_file`, or `run_validation = false`", [](const Job& j) -> Because {
    if (auto b = if_synthetic(j)) return b;
    if (!j.data.val_file.empty()) return std::string("val_file is given (val_fraction splits the training file only without one)");
    return when(!j.train.run_validation, "[train] run_validation is false: no record is held out");
  });
  add("data.val_file", "`run_validation = false`", [](const Job& j) {
    return when(!j.train.run_validation, "[train] run_validation is false: the file is not read");
  });
  add("data.prompt_field", "a format other than `jsonl`, or a `prompt_template`", [](const Job& j) -> Because {
    if (auto b = unless_jsonl(j)) return b;
    return when(!j.data.prompt_template.empty(), "prompt_template names the prompt's fields");
  });
  add("data.response_field", "a format other than `jsonl`", unless_jsonl);
  add("data.prompt_template", "synthetic or chat data", [](const Job& j) -> Because {
    if (auto b = if_synthetic(j)) return b;
    return when(j.data.format == DataFormat::kChat, "format is \"chat\", rendered in the model's chat format");
  });
  add("data.on_bad_record", "synthetic data", if_synthetic);
  add("data.chat_format", "a format other than `chat` or `preference`", [](const Job& j) -> Because {
    if (j.data.format == DataFormat::kChat || j.data.format == DataFormat::kPreference) return std::nullopt;
    return fmt::format("format is \"{}\" (only \"chat\" and \"preference\" render conversations)",
                       enum_name(j.data.format));
  });
  for (const char* key : {"data.train_on"})
    add(key, "a format other than `chat` or `preference`", [](const Job& j) -> Because {
      if (j.data.format == DataFormat::kChat || j.data.format == DataFormat::kPreference) return std::nullopt;
      return fmt::format("format is \"{}\" (only \"chat\" and \"preference\" render conversations)",
                         enum_name(j.data.format));
    });
  add("data.long_examples", "synthetic data, or `batching_strategy = \"padding\"`", [](const Job& j) -> Because {
    if (auto b = if_synthetic(j)) return b;
    return when(j.train.batching_strategy == BatchingStrategy::kPadding,
                "[train] batching_strategy is \"padding\", which always cuts examples to context_length");
  });
  // [train]
  add("train.batching_strategy", "synthetic data", if_synthetic);
  add("train.warmup_steps", "`lr_scheduler = \"step\"`", [](const Job& j) {
    return when(j.train.lr_scheduler == LrScheduler::kStep, "lr_scheduler is \"step\" (only \"cosine\" warms up)");
  });
  add("train.gamma", "`lr_scheduler = \"cosine\"`, or one epoch", [](const Job& j) -> Because {
    if (j.train.lr_scheduler == LrScheduler::kCosine) return std::string("lr_scheduler is \"cosine\" (gamma is StepLR's factor)");
    return when(j.train.num_epochs == 1, "num_epochs is 1 (StepLR lowers the rate after each epoch)");
  });
  add("train.gradient_clipping_threshold", "`gradient_clipping = false`",
      [](const Job& j) { return when(!j.train.gradient_clipping, "gradient_clipping is false"); });
  add("train.num_freeze_layers", "`freeze_layers = false`",
      [](const Job& j) { return when(!j.train.freeze_layers, "freeze_layers is false"); });
  add("train.freeze_layers", "`num_freeze_layers = 0`",
      [](const Job& j) { return when(j.train.num_freeze_layers == 0, "num_freeze_layers is 0: no block is frozen"); });
  add("train.max_eval_step", "`run_validation = false`",
      [](const Job& j) { return when(!j.train.run_validation, "run_validation is false"); });
  add("train.val_batch_size", "`run_validation = false`, unless DPO's reference is precomputed", [](const Job& j) {
    const bool precomputed = j.train.objective == Objective::kDpo && dpo_reference(j) == DpoReference::kPrecomputed;
    return when(!j.train.run_validation && !precomputed,
                "run_validation is false (nor is DPO's reference precomputed, whose pass it also sizes)");
  });
  add("train.max_nonfinite_skips", "`on_nonfinite = \"stop\"`", [](const Job& j) {
    return when(j.train.on_nonfinite == OnNonFinite::kStop,
                "on_nonfinite is \"stop\" (the first non-finite step ends the run)");
  });
  add("train.mixed_precision", "`pure_bf16 = true`", [](const Job& j) {
    return when(j.train.pure_bf16, "pure_bf16 is true: parameters, compute and optimizer state are all bf16");
  });
  // [fsdp]
  add("fsdp.uncheckpointed_blocks", "`activation_checkpointing = false`", [](const Job& j) {
    return when(!j.fsdp.activation_checkpointing, "activation_checkpointing is false: every block keeps its activations");
  });
  add("fsdp.reduce_dtype", "neither `mixed_precision` nor `pure_bf16`", [](const Job& j) {
    return when(!j.train.mixed_precision && !j.train.pure_bf16,
                "[train] mixed_precision and pure_bf16 are false: gradients are computed and reduced in fp32");
  });
  add("fsdp.hsdp_shard_size", "a strategy other than `HYBRID_SHARD`", [](const Job& j) -> Because {
    if (j.fsdp.sharding_strategy == ShardingStrategy::kHybridShard) return std::nullopt;
    return fmt::format("sharding_strategy is {}", enum_name(j.fsdp.sharding_strategy));
  });
  add("fsdp.offload_params", "nothing frozen: `[peft] method = \"none\"` without `freeze_layers`",
      [](const Job& j) {
        return when(!j.peft.adapters() && (!j.train.freeze_layers || j.train.num_freeze_layers == 0),
                    "nothing is frozen (no LoRA, no freeze_layers): cpu_offload already offloads every shard");
      });
  for (const char* key : {"fsdp.low_cpu_fsdp", "fsdp.low_cpu_fsdp_min_params"})
    add(key, "a preset or `init = \"random\"`", if_weights_made_in_place);
  // (QLoRA's base folder stored in 4 bits streams whatever these say: whether it is, the folder tells.)
  add("fsdp.load_readers", "a preset, `init = \"random\"`, or weights that are not streamed", [](const Job& j) -> Because {
    if (auto b = if_weights_made_in_place(j)) return b;
    return when(!j.fsdp.low_cpu_fsdp && j.fsdp.low_cpu_fsdp_min_params == 0 && j.peft.method != PeftMethod::kQlora,
                "the weights are not streamed (low_cpu_fsdp is false, low_cpu_fsdp_min_params is 0, and the "
                "method is not QLoRA)");
  });
  // [checkpoint]
  add("checkpoint.on_data_change", "`resume = \"none\"`", [](const Job& j) {
    return when(j.checkpoint.resume == "none", "resume is \"none\": no checkpoint is resumed");
  });
  add("checkpoint.fully_parallel", "`FULL_SHARD` or `SHARD_GRAD_OP`", [](const Job& j) -> Because {
    const ShardingStrategy s = j.fsdp.sharding_strategy;
    if (s != ShardingStrategy::kFullShard && s != ShardingStrategy::kShardGradOp) return std::nullopt;
    return fmt::format("sharding_strategy is {}: no two ranks hold the same shard", enum_name(s));
  });
  // [metrics]
  add("metrics.peak_tflops", "`jsonl = false`",
      [](const Job& j) { return when(!j.metrics.jsonl, "jsonl is false (MFU is written there)"); });
  for (const char* key : {"metrics.profiler_dir", "metrics.profiler_wait_steps", "metrics.profiler_warmup_steps",
                          "metrics.profiler_active_steps"})
    add(key, "`use_profiler = false`", [](const Job& j) { return when(!j.metrics.use_profiler, "use_profiler is false"); });
  add("metrics.flop_counter_start", "`flop_counter = false`",
      [](const Job& j) { return when(!j.metrics.flop_counter, "flop_counter is false"); });
  return r;
}

}  // namespace

const std::vector<NoEffectRule>& no_effect_rules() {
  static const std::vector<NoEffectRule> rules = build_rules();
  return rules;
}

}  // namespace shardtune::job
