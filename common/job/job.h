// The job: one struct per section of the TOML job file. Each component receives only its own
// section. Every field's meaning, default and allowed values are declared once, in
// job_schema.cpp, which also generates docs/job-file.md (`shardtune schema`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace shardtune::job {

enum class Launcher { kSrun, kMpirun };
enum class Device { kAuto, kCuda, kCpu };
enum class ModelInit { kPretrained, kRandom };
enum class ModelPreset { kNone, kTiny };
enum class PeftMethod { kNone, kLora, kQlora };
enum class DataFormat { kSynthetic, kAlpaca, kSamsum, kGrammar, kJsonl, kChat, kPreference };
enum class ChatFormat { kAuto, kLlama3, kLlama31, kLlama2 };
enum class TrainOn { kAssistant, kAll };
enum class BadRecordPolicy { kError, kSkip };
enum class LongExamples { kSplit, kTruncate };
enum class BatchingStrategy { kPacking, kPadding };
enum class LrScheduler { kStep, kCosine };
enum class Optimizer { kAdamW, kAdamW8bit, kAdafactor };
enum class Objective { kSft, kDpo };
enum class DpoLossType { kSigmoid, kIpo, kHinge };
enum class DpoReference { kAuto, kBase, kPrecomputed, kModel };
enum class OnNonFinite { kStop, kSkipStep };
enum class OnDataChange { kRefuse, kNewSchedule };
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };
enum class CheckpointType { kFull, kSharded };
enum class LoadReaders { kNode, kRank0 };

struct JobSection {
  std::string name;
  std::string output_dir;
};

struct SlurmSection {
  int64_t nodes = 1;
  int64_t min_nodes = 0;  // 0: nodes
  int64_t gpus_per_node = 0;
  int64_t ntasks_per_node = 0;
  int64_t cpus_per_task = 1;
  std::string partition;
  std::string account;
  std::string qos;
  std::string time;
  std::string constraint;
  bool exclusive = false;
  std::string mail_user;
  std::string mail_type;
  std::vector<std::string> extra_sbatch_options;
  int64_t signal_lead_s = 300;
  int64_t max_requeues = 3;

  // Ranks on each node once defaults are resolved (one per GPU, or 1 on a CPU-only job).
  int64_t ranks_per_node() const { return ntasks_per_node > 0 ? ntasks_per_node : (gpus_per_node > 0 ? gpus_per_node : 1); }
  int64_t world_size() const { return nodes * ranks_per_node(); }
};

struct LaunchSection {
  Launcher launcher = Launcher::kSrun;
  std::string srun_mpi = "pmix";
  std::vector<std::string> extra_srun_options;
  std::vector<std::string> extra_mpirun_options;
  double collective_timeout_s = 300.0;
  Device device = Device::kAuto;
  double gpu_memory_gib = 0;  // memory of one GPU, for the planner; 0: not given
  int64_t threads_per_rank = 0;  // CPU threads of each rank; 0: its share of the node (runtime/dist/cpu_threads.h)
};

struct ModelSection {
  std::string path;
  ModelPreset preset = ModelPreset::kNone;
  ModelInit init = ModelInit::kPretrained;
};

struct PeftSection {
  PeftMethod method = PeftMethod::kNone;
  int64_t lora_r = 8;
  double lora_alpha = 32.0;
  double lora_dropout = 0.05;
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};
  std::string from_peft_checkpoint;
  int64_t nf4_block_size = 64;  // QLoRA: the NF4 base's block size
  bool nf4_double_quant = true;  // QLoRA: the block scales double-quantised
  bool adapters() const { return method != PeftMethod::kNone; }  // LoRA or QLoRA
};

struct DataSection {
  DataFormat format = DataFormat::kSynthetic;
  std::string train_file;
  std::string val_file;
  double val_fraction = 0.05;
  std::string tokenizer;
  std::string prompt_field = "prompt";
  std::string response_field = "response";
  std::string prompt_template;
  BadRecordPolicy on_bad_record = BadRecordPolicy::kError;
  LongExamples long_examples = LongExamples::kSplit;
  ChatFormat chat_format = ChatFormat::kAuto;
  TrainOn train_on = TrainOn::kAssistant;
  // Several sources ([[data.sources]]): samples of the mixture per epoch; 0: the epoch ends where
  // the first source would start over (runtime/data/mixture.h).
  int64_t samples_per_epoch = 0;
};

// One [[data.sources]] entry: its own file, format, prompt and split (the keys it does not set
// are [data]'s), mixed with the others by weight.
struct DataSource {
  std::string name;  // default: the training file's name without its extension
  double weight = 1.0;
  DataSection data;
};

struct TrainSection {
  Objective objective = Objective::kSft;
  int64_t batch_size_training = 4;
  int64_t val_batch_size = 1;
  int64_t context_length = 4096;
  BatchingStrategy batching_strategy = BatchingStrategy::kPacking;
  int64_t gradient_accumulation_steps = 1;
  bool gradient_clipping = false;
  double gradient_clipping_threshold = 1.0;
  int64_t num_epochs = 3;
  int64_t max_train_step = 0;
  int64_t max_eval_step = 0;
  int64_t num_workers_dataloader = 1;
  double lr = 1e-4;
  double weight_decay = 0.0;
  Optimizer optimizer = Optimizer::kAdamW;
  // optimizer = "adafactor": transformers.Adafactor's arguments (runtime/fsdp/adafactor.h).
  double adafactor_beta1 = 0.0;  // 0: no first moment
  double adafactor_decay_rate = -0.8;
  double adafactor_clip_threshold = 1.0;
  double adafactor_eps = 1e-30;
  double adafactor_eps_scale = 1e-3;
  bool adafactor_scale_parameter = false;
  bool adafactor_relative_step = false;
  bool adafactor_warmup_init = false;
  double gamma = 0.85;
  LrScheduler lr_scheduler = LrScheduler::kStep;
  int64_t warmup_steps = 0;
  int64_t seed = 42;
  bool run_validation = true;
  bool mixed_precision = true;
  bool use_fp16 = false;
  bool pure_bf16 = false;
  bool freeze_layers = false;
  int64_t num_freeze_layers = 1;
  OnNonFinite on_nonfinite = OnNonFinite::kStop;
  int64_t max_nonfinite_skips = 10;

  // Samples per optimizer step across the job: per rank x ranks x accumulation steps.
  int64_t global_batch(int64_t world_size) const {
    return batch_size_training * world_size * gradient_accumulation_steps;
  }
};

// [train] objective = "dpo": direct preference optimisation (runtime/train/dpo.h).
struct DpoSection {
  double beta = 0.1;
  DpoLossType loss_type = DpoLossType::kSigmoid;
  double label_smoothing = 0.0;  // sigmoid only: the conservative DPO's share of flipped labels
  DpoReference reference = DpoReference::kAuto;
  std::string reference_model;  // reference = "model": its folder; empty: the policy's [model] path
};

struct FsdpSection {
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;
  int64_t hsdp_shard_size = 0;
  bool activation_checkpointing = true;
  int64_t uncheckpointed_blocks = 0;  // with activation_checkpointing: the last blocks keep their activations
  bool low_cpu_fsdp = false;
  int64_t low_cpu_fsdp_min_params = 1'000'000'000;
  LoadReaders load_readers = LoadReaders::kNode;
  CheckpointType checkpoint_type = CheckpointType::kSharded;
  bool save_optimizer = false;
  common::Dtype reduce_dtype = common::Dtype::kF32;  // kF32 or kBF16
  bool cpu_offload = false;     // trainable shards, gradients and optimizer state in host memory
  bool offload_params = false;  // with cpu_offload: the frozen shards too
};

struct CheckpointSection {
  std::string dir;
  int64_t every_steps = 0;
  int64_t keep_last = 2;
  std::string resume = "auto";
  bool async = false;
  bool fully_parallel = true;
  OnDataChange on_data_change = OnDataChange::kRefuse;
};

struct MetricsSection {
  int64_t log_every_steps = 10;
  bool jsonl = true;
  double peak_tflops = 0;  // per rank; 0: the GPU's from the table (none on the CPU)
  bool save_metrics = false;
  bool use_profiler = false;
  std::string profiler_dir;  // default: <output_dir>/profiler
  int64_t profiler_wait_steps = 1;
  int64_t profiler_warmup_steps = 2;
  int64_t profiler_active_steps = 3;
  bool flop_counter = false;
  int64_t flop_counter_start = 3;
  bool sample_ids = false;
  bool tensorboard = false;
};

struct Job {
  JobSection job;
  SlurmSection slurm;
  LaunchSection launch;
  ModelSection model;
  PeftSection peft;
  DataSection data;
  TrainSection train;
  DpoSection dpo;
  FsdpSection fsdp;
  CheckpointSection checkpoint;
  MetricsSection metrics;
  std::vector<DataSource> data_sources;  // [[data.sources]]; empty: [data] alone is the one source
};

// The job's data sources: its [[data.sources]], or [data] itself as one source of weight 1 (with
// an empty name).
std::vector<DataSource> data_sources(const Job& job);

// The reference a DPO job uses: reference = "auto" is the base without its adapters for LoRA and
// QLoRA, a frozen sharded copy of the starting weights for a full fine-tune.
DpoReference dpo_reference(const Job& job);

// Shard-group size once defaults are resolved: the world for FULL_SHARD and SHARD_GRAD_OP, 1 for
// NO_SHARD, hsdp_shard_size (default: ranks per node) for HYBRID_SHARD. The only place it is worked
// out; the Job form uses the job's own world size (the one it asks Slurm for).
int64_t shard_group_size(const FsdpSection& fsdp, int64_t world_size, int64_t ranks_per_node);
int64_t shard_group_size(const Job& job);

// The dtypes a job trains in, worked out here only (the rank's FSDP and the planner both read it):
// sharded parameters and optimizer state (master), gathered parameters, activations and local
// gradients (compute), gradients on the wire (reduce), and the shards of frozen parameters (LoRA
// keeps its frozen base in the compute dtype: no fp32 master its forward would round anyway).
struct Precision {
  common::Dtype master = common::Dtype::kF32;
  common::Dtype compute = common::Dtype::kF32;
  common::Dtype reduce = common::Dtype::kF32;
  common::Dtype frozen = common::Dtype::kF32;
};
Precision precision(const TrainSection& train, const FsdpSection& fsdp, bool lora);

}  // namespace shardtune::job
