// The job file's schema: one line per field with its documentation and constraint. This is the
// single place where a field is declared; docs/job-file.md is generated from it.
#include "common/job/schema.h"

#include <algorithm>
#include <cctype>

#include "common/job/field_builder.h"
#include "common/job/slurm_time.h"
#include "common/lora_targets.h"
#include "common/shell_words.h"

namespace shardtune::job {
namespace detail {

template <>
struct EnumNames<Launcher> {
  static constexpr std::array<std::pair<Launcher, std::string_view>, 2> kNames{
      {{Launcher::kSrun, "srun"}, {Launcher::kMpirun, "mpirun"}}};
};
template <>
struct EnumNames<Device> {
  static constexpr std::array<std::pair<Device, std::string_view>, 3> kNames{
      {{Device::kAuto, "auto"}, {Device::kCuda, "cuda"}, {Device::kCpu, "cpu"}}};
};
template <>
struct EnumNames<ModelInit> {
  static constexpr std::array<std::pair<ModelInit, std::string_view>, 2> kNames{
      {{ModelInit::kPretrained, "pretrained"}, {ModelInit::kRandom, "random"}}};
};
template <>
struct EnumNames<ModelPreset> {
  static constexpr std::array<std::pair<ModelPreset, std::string_view>, 2> kNames{
      {{ModelPreset::kNone, "none"}, {ModelPreset::kTiny, "tiny"}}};
};
template <>
struct EnumNames<PeftMethod> {
  static constexpr std::array<std::pair<PeftMethod, std::string_view>, 3> kNames{
      {{PeftMethod::kNone, "none"}, {PeftMethod::kLora, "lora"}, {PeftMethod::kQlora, "qlora"}}};
};
template <>
struct EnumNames<DataFormat> {
  static constexpr std::array<std::pair<DataFormat, std::string_view>, 7> kNames{
      {{DataFormat::kSynthetic, "synthetic"},
       {DataFormat::kAlpaca, "alpaca"},
       {DataFormat::kSamsum, "samsum"},
       {DataFormat::kGrammar, "grammar"},
       {DataFormat::kJsonl, "jsonl"},
       {DataFormat::kChat, "chat"},
       {DataFormat::kPreference, "preference"}}};
};
template <>
struct EnumNames<ChatFormat> {
  static constexpr std::array<std::pair<ChatFormat, std::string_view>, 4> kNames{
      {{ChatFormat::kAuto, "auto"},
       {ChatFormat::kLlama3, "llama3"},
       {ChatFormat::kLlama31, "llama3.1"},
       {ChatFormat::kLlama2, "llama2"}}};
};
template <>
struct EnumNames<TrainOn> {
  static constexpr std::array<std::pair<TrainOn, std::string_view>, 2> kNames{
      {{TrainOn::kAssistant, "assistant"}, {TrainOn::kAll, "all"}}};
};
template <>
struct EnumNames<BadRecordPolicy> {
  static constexpr std::array<std::pair<BadRecordPolicy, std::string_view>, 2> kNames{
      {{BadRecordPolicy::kError, "error"}, {BadRecordPolicy::kSkip, "skip"}}};
};
template <>
struct EnumNames<LongExamples> {
  static constexpr std::array<std::pair<LongExamples, std::string_view>, 2> kNames{
      {{LongExamples::kSplit, "split"}, {LongExamples::kTruncate, "truncate"}}};
};
template <>
struct EnumNames<BatchingStrategy> {
  static constexpr std::array<std::pair<BatchingStrategy, std::string_view>, 2> kNames{
      {{BatchingStrategy::kPacking, "packing"}, {BatchingStrategy::kPadding, "padding"}}};
};
template <>
struct EnumNames<LrScheduler> {
  static constexpr std::array<std::pair<LrScheduler, std::string_view>, 2> kNames{
      {{LrScheduler::kStep, "step"}, {LrScheduler::kCosine, "cosine"}}};
};
template <>
struct EnumNames<Optimizer> {
  static constexpr std::array<std::pair<Optimizer, std::string_view>, 3> kNames{
      {{Optimizer::kAdamW, "adamw"}, {Optimizer::kAdamW8bit, "adamw_8bit"}, {Optimizer::kAdafactor, "adafactor"}}};
};
template <>
struct EnumNames<Objective> {
  static constexpr std::array<std::pair<Objective, std::string_view>, 2> kNames{
      {{Objective::kSft, "sft"}, {Objective::kDpo, "dpo"}}};
};
template <>
struct EnumNames<DpoLossType> {
  static constexpr std::array<std::pair<DpoLossType, std::string_view>, 3> kNames{
      {{DpoLossType::kSigmoid, "sigmoid"}, {DpoLossType::kIpo, "ipo"}, {DpoLossType::kHinge, "hinge"}}};
};
template <>
struct EnumNames<DpoReference> {
  static constexpr std::array<std::pair<DpoReference, std::string_view>, 4> kNames{
      {{DpoReference::kAuto, "auto"},
       {DpoReference::kBase, "base"},
       {DpoReference::kPrecomputed, "precomputed"},
       {DpoReference::kModel, "model"}}};
};
template <>
struct EnumNames<OnNonFinite> {
  static constexpr std::array<std::pair<OnNonFinite, std::string_view>, 2> kNames{
      {{OnNonFinite::kStop, "stop"}, {OnNonFinite::kSkipStep, "skip_step"}}};
};
template <>
struct EnumNames<OnDataChange> {
  static constexpr std::array<std::pair<OnDataChange, std::string_view>, 2> kNames{
      {{OnDataChange::kRefuse, "refuse"}, {OnDataChange::kNewSchedule, "new_schedule"}}};
};
template <>
struct EnumNames<ShardingStrategy> {
  static constexpr std::array<std::pair<ShardingStrategy, std::string_view>, 4> kNames{
      {{ShardingStrategy::kFullShard, "FULL_SHARD"},
       {ShardingStrategy::kShardGradOp, "SHARD_GRAD_OP"},
       {ShardingStrategy::kNoShard, "NO_SHARD"},
       {ShardingStrategy::kHybridShard, "HYBRID_SHARD"}}};
};
template <>
struct EnumNames<common::Dtype> {  // the reduction types a job may choose
  static constexpr std::array<std::pair<common::Dtype, std::string_view>, 2> kNames{
      {{common::Dtype::kF32, "fp32"}, {common::Dtype::kBF16, "bf16"}}};
};
template <>
struct EnumNames<LoadReaders> {
  static constexpr std::array<std::pair<LoadReaders, std::string_view>, 2> kNames{
      {{LoadReaders::kNode, "node"}, {LoadReaders::kRank0, "rank0"}}};
};
template <>
struct EnumNames<CheckpointType> {
  static constexpr std::array<std::pair<CheckpointType, std::string_view>, 2> kNames{
      {{CheckpointType::kFull, "full"}, {CheckpointType::kSharded, "sharded"}}};
};

}  // namespace detail

template <class E>
std::string_view enum_name(E value) {
  return detail::FieldType<E>::name_of(value);
}
template <class E>
std::optional<E> enum_value(std::string_view name) {
  for (const auto& [value, spelled] : detail::EnumNames<E>::kNames)
    if (spelled == name) return value;
  return std::nullopt;
}
template std::optional<ChatFormat> enum_value(std::string_view);
template std::optional<DpoLossType> enum_value(std::string_view);

template std::string_view enum_name(Launcher);
template std::string_view enum_name(Device);
template std::string_view enum_name(ModelInit);
template std::string_view enum_name(ModelPreset);
template std::string_view enum_name(PeftMethod);
template std::string_view enum_name(DataFormat);
template std::string_view enum_name(ChatFormat);
template std::string_view enum_name(TrainOn);
template std::string_view enum_name(BadRecordPolicy);
template std::string_view enum_name(LongExamples);
template std::string_view enum_name(BatchingStrategy);
template std::string_view enum_name(LrScheduler);
template std::string_view enum_name(Optimizer);
template std::string_view enum_name(Objective);
template std::string_view enum_name(DpoLossType);
template std::string_view enum_name(DpoReference);
template std::string_view enum_name(ShardingStrategy);
template std::string_view enum_name(common::Dtype);
template std::string_view enum_name(CheckpointType);
template std::string_view enum_name(LoadReaders);
template std::string_view enum_name(OnDataChange);

namespace {

using detail::SectionBuilder;

// Letters, digits, '.', '_' and '-': safe in file names, Slurm job names and log lines.
bool is_simple_name(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

using common::is_one_line;

// Values written into #SBATCH lines: empty (the option is left out) or one sbatch word.
constexpr const char* kSbatchWord = "one word of printable ASCII without spaces, quotes, '\\', '#', '$' or '`'";
bool is_empty_or_sbatch_word(const std::string& s) { return s.empty() || common::is_sbatch_word(s); }

bool all_one_line(const std::vector<std::string>& v) {
  for (const std::string& s : v)
    if (!is_one_line(s)) return false;
  return true;
}

std::vector<SectionSpec> build_schema() {
  std::vector<SectionSpec> schema;
  schema.reserve(16);  // builders hold references into this vector
  {
    SectionBuilder<JobSection> s(schema, "job", "What the job is called and where its files go.", &Job::job);
    s.field("name", &JobSection::name, "Name of the job, used for the Slurm job name and log lines. Required.")
        .require("letters, digits, '.', '_' or '-' (1 to 128 of them)",
                 [](const std::string& v) { return v.empty() || is_simple_name(v); });
    s.field("output_dir", &JobSection::output_dir,
            "Directory for logs, the sbatch script, the resolved job file and checkpoints. "
            "Default: runs/<name>. Slurm writes its log there, so it is one word of printable ASCII "
            "without '%'.")
        .require("a path of printable ASCII without spaces, quotes, '\\', '#', '$', '`' or '%'",
                 [](const std::string& v) { return v.empty() || common::is_sbatch_path(v); });
  }
  {
    SectionBuilder<SlurmSection> s(schema, "slurm", "The Slurm allocation: each becomes an #SBATCH line.",
                                   &Job::slurm);
    s.field("nodes", &SlurmSection::nodes, "Number of nodes.").in_range(1, 100000);
    s.field("min_nodes", &SlurmSection::min_nodes,
            "The fewest nodes the job may run on: it asks sbatch for --nodes=min_nodes-nodes, so a start (the "
            "resubmission after a lost node, say) may get fewer than `nodes` and resumes at the world size it "
            "gets. 0: exactly `nodes`.")
        .in_range(0, 100000);
    s.field("gpus_per_node", &SlurmSection::gpus_per_node,
            "GPUs per node; one rank runs per GPU. 0 for a CPU-only job.")
        .in_range(0, 64);
    s.field("ntasks_per_node", &SlurmSection::ntasks_per_node,
            "Ranks per node. 0: one per GPU, or 1 on a CPU-only job. With GPUs it must equal gpus_per_node.")
        .in_range(0, 1024);
    s.field("cpus_per_task", &SlurmSection::cpus_per_task,
            "CPUs per rank, as Slurm counts them (data loading threads run on them). srun gets it as "
            "SRUN_CPUS_PER_TASK; mpirun binds each rank to that many CPUs of its own.")
        .in_range(1, 1024);
    s.field("partition", &SlurmSection::partition, "Partition (--partition); empty: the cluster's default.")
        .require(kSbatchWord, is_empty_or_sbatch_word);
    s.field("account", &SlurmSection::account, "Account to charge (--account); empty: none.")
        .require(kSbatchWord, is_empty_or_sbatch_word);
    s.field("qos", &SlurmSection::qos, "Quality of service (--qos); empty: none.")
        .require(kSbatchWord, is_empty_or_sbatch_word);
    s.field("time", &SlurmSection::time,
            "Time limit in a Slurm format (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; seconds count "
            "as whole minutes, rounded up); \"0\", \"UNLIMITED\", \"INFINITE\" or \"-1\": no limit; empty: the "
            "partition's limit.")
        .require("a Slurm time limit such as \"04:00:00\", \"2-00:00:00\" or \"UNLIMITED\"",
                 [](const std::string& t) { return t.empty() || parse_slurm_time(t).has_value(); });
    s.field("constraint", &SlurmSection::constraint, "Node features (--constraint), e.g. \"h100\"; empty: none.")
        .require(kSbatchWord, is_empty_or_sbatch_word);
    s.field("exclusive", &SlurmSection::exclusive, "Ask for whole nodes (--exclusive).");
    s.field("mail_user", &SlurmSection::mail_user, "Address for Slurm's e-mails (--mail-user); empty: none.")
        .require(kSbatchWord, is_empty_or_sbatch_word);
    s.field("mail_type", &SlurmSection::mail_type,
            "When Slurm sends e-mail (--mail-type), e.g. \"END,FAIL\"; empty: never.")
        .require(kSbatchWord, is_empty_or_sbatch_word);
    s.field("extra_sbatch_options", &SlurmSection::extra_sbatch_options,
            "More sbatch options, one per element, each written as its own #SBATCH line "
            "(e.g. [\"--reservation=big\"]).")
        .require("options that start with '-', each one word of printable ASCII without spaces, quotes, "
                 "'\\', '#', '$' or '`'",
                 [](const std::vector<std::string>& v) {
                   for (const std::string& o : v)
                     if (o.empty() || o[0] != '-' || !common::is_sbatch_word(o)) return false;
                   return true;
                 });
    s.field("signal_lead_s", &SlurmSection::signal_lead_s,
            "Seconds before the time limit at which Slurm sends USR1, so the job can checkpoint and "
            "requeue. Slurm may send it up to 60 s early.")
        .in_range(0, 65535);
    s.field("max_requeues", &SlurmSection::max_requeues,
            "How many times the job restarts itself: requeued after a time limit or a preemption, submitted "
            "again after a lost node.")
        .in_range(0, 1000);
  }
  {
    SectionBuilder<LaunchSection> s(schema, "launch", "How the ranks are started inside the allocation.",
                                    &Job::launch);
    s.field("launcher", &LaunchSection::launcher,
            "srun (srun --mpi=<srun_mpi>) or mpirun (Open MPI's launcher inside the allocation).");
    s.field("srun_mpi", &LaunchSection::srun_mpi, "The --mpi plugin srun uses.")
        .require("one of pmix, pmix_v3, pmix_v4, pmi2",
                 [](const std::string& v) { return v == "pmix" || v == "pmix_v3" || v == "pmix_v4" || v == "pmi2"; });
    s.field("extra_srun_options", &LaunchSection::extra_srun_options, "More srun options, one per element.")
        .require("options without control characters", all_one_line);
    s.field("extra_mpirun_options", &LaunchSection::extra_mpirun_options,
            "More mpirun options, one per element (e.g. [\"--mca\", \"btl_tcp_if_include\", \"ib0\"]).")
        .require("options without control characters", all_one_line);
    s.field("collective_timeout_s", &LaunchSection::collective_timeout_s,
            "A collective that has not finished after this many seconds fails every rank, naming the "
            "ranks that never arrived, instead of hanging.")
        .in_range(0.1, 86400.0);
    s.field("device", &LaunchSection::device,
            "Where each rank trains. cuda: the GPU of its local rank (OMPI_COMM_WORLD_LOCAL_RANK or "
            "SLURM_LOCALID, among CUDA_VISIBLE_DEVICES), with NCCL between ranks; the job "
            "fails before training if there is none. cpu: the CPU, with MPI. auto: cuda when a GPU is "
            "visible, else cpu; never a silent fall back to the CPU when a GPU is there but unusable.");
    s.field("gpu_memory_gib", &LaunchSection::gpu_memory_gib,
            "Memory of one of the job's GPUs in GiB (e.g. 80). `shardtune plan` checks the job against it, "
            "and `shardtune submit` warns before queueing a job that will not fit. 0: not given.")
        .in_range(0.0, 1e6);
    s.field("threads_per_rank", &LaunchSection::threads_per_rank,
            "CPU threads each rank computes with (OpenMP, LibTorch's intra-op pool and OpenBLAS alike). 0: "
            "OMP_NUM_THREADS when the environment sets it, else the rank's share of its node: Slurm's "
            "cpus_per_task inside a Slurm job, otherwise the node's physical cores divided by its ranks, "
            "never more than the CPUs the rank is bound to. The rank log says what was chosen and why.")
        .in_range(0, 4096);
  }
  {
    SectionBuilder<ModelSection> s(schema, "model", "The model to fine-tune.", &Job::model);
    s.field("path", &ModelSection::path,
            "A Hugging Face model folder (config.json, *.safetensors, tokenizer files). "
            "Give either path or preset.")
        .require("one line without control characters", is_one_line);
    s.field("preset", &ModelSection::preset,
            "A built-in model shape instead of a folder: tiny is a 2-block debug Llama for tests.");
    s.field("init", &ModelSection::init,
            "pretrained: weights from the folder; random: Hugging Face's initialisation "
            "(initializer_range), for tests and debugging.");
  }
  {
    SectionBuilder<PeftSection> s(schema, "peft", "Parameter-efficient fine-tuning.", &Job::peft);
    s.field("method", &PeftSection::method,
            "none: full fine-tuning; lora: low-rank adapters on the target modules, the base model frozen "
            "(no gradient, no optimizer state, held in the compute dtype); qlora: the same on a base whose "
            "block projections are held in 4-bit NF4 as bitsandbytes stores it (docs/qlora.md), sharded and "
            "all-gathered packed, dequantised per unit. Checkpoints then hold only the adapters and name the "
            "base model (and its quantisation) they need.");
    s.field("lora_r", &PeftSection::lora_r, "LoRA rank r.").in_range(1, 4096);
    s.field("lora_alpha", &PeftSection::lora_alpha, "LoRA scaling numerator: adapters add (alpha / r) B A x.")
        .positive();
    s.field("lora_dropout", &PeftSection::lora_dropout,
            "Dropout on each adapter's input while training, its masks drawn from [train] seed, the step and "
            "the rank: a rerun or a resume draws the same ones.")
        .in_range(0.0, 0.99);
    s.field("target_modules", &PeftSection::target_modules,
            "Linear layers that get adapters, by their Hugging Face names: q_proj, k_proj, v_proj, o_proj, "
            "gate_proj, up_proj, down_proj (in every block), lm_head; \"all-linear\" means the seven block "
            "projections.")
        .require("a non-empty list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head or "
                 "all-linear",
                 [](const std::vector<std::string>& v) {
                   return !v.empty() &&
                          std::all_of(v.begin(), v.end(), [](const std::string& m) { return common::is_lora_target_name(m); });
                 });
    s.field("nf4_block_size", &PeftSection::nf4_block_size,
            "QLoRA: elements per NF4 block, each with its own scale (bitsandbytes' blocksize; transformers "
            "always uses 64).")
        .require("32, 64, 128, 256, 512, 1024, 2048 or 4096",
                 [](int64_t b) { return b >= 32 && b <= 4096 && (b & (b - 1)) == 0; });
    s.field("nf4_double_quant", &PeftSection::nf4_double_quant,
            "QLoRA: quantise the block scales again, to 8 bits in blocks of 256 (bitsandbytes' "
            "bnb_4bit_use_double_quant): 0.516 instead of 0.5625 bytes per weight.");
    s.field("from_peft_checkpoint", &PeftSection::from_peft_checkpoint,
            "A PEFT adapter folder (adapter_config.json, adapter_model.safetensors) whose adapters training "
            "starts from, instead of fresh ones; its r, lora_alpha and target_modules must be this section's. "
            "Empty: fresh adapters.")
        .require("one line without control characters", is_one_line);
  }
  {
    SectionBuilder<DataSection> s(schema, "data", "Training and validation data.", &Job::data);
    s.field("format", &DataSection::format,
            "synthetic (generated tokens, no files), alpaca (instruction/input/output JSON), samsum "
            "(dialogue/summary JSON or JSONL), grammar (input/target CSV), jsonl (prompt_field/response_field), "
            "chat (conversations: OpenAI-style messages or ShareGPT-style conversations, JSON or JSONL), "
            "preference (pairs for [train] objective = \"dpo\": records with prompt, chosen and rejected, either "
            "strings, the prompt rendered by prompt_template, or a conversation of messages and the answers as "
            "strings or one assistant message each, rendered in the model's chat format; docs/dpo.md).");
    s.field("train_file", &DataSection::train_file, "Training data file (all formats but synthetic).")
        .require("one line without control characters", is_one_line);
    s.field("val_file", &DataSection::val_file,
            "Validation data file; empty: split val_fraction off the training data.")
        .require("one line without control characters", is_one_line);
    s.field("val_fraction", &DataSection::val_fraction,
            "Share of the training data held out for validation when val_file is empty.")
        .require("in [0, 1)", [](double v) { return v >= 0.0 && v < 1.0; });
    s.field("tokenizer", &DataSection::tokenizer,
            "tokenizer.json or tokenizer.model; empty: the one in the model folder.")
        .require("one line without control characters", is_one_line);
    s.field("prompt_field", &DataSection::prompt_field,
            "Prompt field of jsonl records (without a prompt_template).");
    s.field("response_field", &DataSection::response_field, "Response field of jsonl records.");
    s.field("prompt_template", &DataSection::prompt_template,
            "Template for the prompt, with {field} placeholders ({{ and }} for braces); a record then needs the "
            "template's fields and the response; empty: the format's own prompt.");
    s.field("on_bad_record", &DataSection::on_bad_record,
            "A malformed record stops the job (error) or is skipped and counted (skip).");
    s.field("long_examples", &DataSection::long_examples,
            "An example longer than context_length: split (its rest continues in the next row, positions "
            "restarting) or truncate (cut to context_length tokens; with padding, always truncated).");
    s.field("chat_format", &DataSection::chat_format,
            "How format = \"chat\" renders a conversation: auto (recognised from the chat_template beside the "
            "tokenizer; an unknown template is refused), llama3 (Llama 3 Instruct), llama3.1 (Llama 3.1/3.3 "
            "Instruct, whose system turn always opens with its knowledge date and \"Today Date: 26 Jul 2024\") or "
            "llama2 (Llama 2 chat).");
    s.field("train_on", &DataSection::train_on,
            "Which tokens of a conversation carry the loss: assistant (the assistant's turns, each with the token "
            "that ends it) or all (every token but the conversation's opening BOS, as no format learns an example's "
            "BOS).");
    s.field("samples_per_epoch", &DataSection::samples_per_epoch,
            "Samples of an epoch, drawn from the sources by weight (each source in its own seeded order, starting "
            "over once all its samples are used). 0: the epoch ends where a source would start over (one source: "
            "all its samples; docs/data-mixing.md). Each rank holds an epoch's order in memory (10 bytes a sample).")
        .in_range(0, 100000000);
  }
  {
    SectionBuilder<TrainSection> s(schema, "train", "The training run (llama-recipes' names and defaults).",
                                   &Job::train);
    s.field("objective", &TrainSection::objective,
            "sft: the next-token loss on the learned tokens; dpo: direct preference optimisation on pairs of "
            "[data] format = \"preference\", as the [dpo] section sets it (docs/dpo.md).");
    s.field("batch_size_training", &TrainSection::batch_size_training, "Micro-batch size per rank.")
        .in_range(1, 1 << 20);
    s.field("val_batch_size", &TrainSection::val_batch_size,
            "Validation batch size per rank; with [dpo] reference = \"precomputed\", also the pairs per rank of "
            "the reference pass.")
        .in_range(1, 1 << 20);
    s.field("context_length", &TrainSection::context_length, "Tokens per sequence.").in_range(2, 1 << 24);
    s.field("batching_strategy", &TrainSection::batching_strategy,
            "packing: documents concatenated into context_length chunks; padding: length-grouped, padded batches.");
    s.field("gradient_accumulation_steps", &TrainSection::gradient_accumulation_steps,
            "Micro-batches per optimizer step.")
        .in_range(1, 1 << 20);
    s.field("gradient_clipping", &TrainSection::gradient_clipping, "Clip gradients by their global norm.");
    s.field("gradient_clipping_threshold", &TrainSection::gradient_clipping_threshold,
            "Global-norm threshold for clipping.")
        .positive();
    s.field("num_epochs", &TrainSection::num_epochs,
            "Passes over the training data. Each trains every sample once, in a seeded order that does not "
            "depend on the world size; an epoch's last step takes the samples left when the global batch does "
            "not divide them.")
        .in_range(1, 1 << 20);
    s.field("max_train_step", &TrainSection::max_train_step,
            "Stop after this many optimizer steps; 0: no limit. Counted in steps of the global batch the job "
            "first started with: a run resumed at another world size stops at the same sample.")
        .at_least(0);
    s.field("max_eval_step", &TrainSection::max_eval_step,
            "Validation batches per evaluation; 0: the whole validation set.")
        .at_least(0);
    s.field("num_workers_dataloader", &TrainSection::num_workers_dataloader,
            "Steps of batches collated ahead of training, each on its own thread, per rank (memory: that many "
            "steps of batches); 0: collated on the training thread.")
        .in_range(0, 256);
    s.field("lr", &TrainSection::lr, "Peak learning rate.").positive();
    s.field("weight_decay", &TrainSection::weight_decay,
            "Decoupled weight decay (AdamW's; Adafactor's as transformers applies it, times each tensor's step).")
        .at_least(0.0);
    s.field("optimizer", &TrainSection::optimizer,
            "adamw: AdamW with fp32 moments (8 bytes per trainable parameter; bf16 with pure_bf16). adamw_8bit: "
            "the same update with both moments stored in 8 bits, block-wise as bitsandbytes' AdamW8bit does (a "
            "dynamic map and one fp32 scale per block of 256 elements of each tensor: 2.03 bytes per trainable "
            "parameter); tensors of fewer than 4096 elements (bitsandbytes' min_8bit_size) and the token "
            "embedding (as Hugging Face's Trainer overrides it) keep fp32 moments. adafactor: Adafactor as "
            "transformers.Adafactor computes it: a matrix keeps its squared gradient's row and column means "
            "(4 (r + c) bytes, on every rank of the shard group), a vector an fp32 second moment, and with "
            "adafactor_beta1 > 0 every tensor an fp32 first moment (4 bytes per trainable parameter).");
    s.field("adafactor_beta1", &TrainSection::adafactor_beta1,
            "Adafactor's first-moment decay (transformers' beta1); 0: none (beta1 = None, the same update).")
        .require("in [0, 1)", [](double v) { return v >= 0.0 && v < 1.0; });
    s.field("adafactor_decay_rate", &TrainSection::adafactor_decay_rate,
            "Adafactor's second-moment decay at step t: 1 - t^decay_rate (transformers' decay_rate).")
        .require("below 0", [](double v) { return v < 0.0; });
    s.field("adafactor_clip_threshold", &TrainSection::adafactor_clip_threshold,
            "Adafactor divides a tensor's update by max(1, RMS(update) / clip_threshold).")
        .positive();
    s.field("adafactor_eps", &TrainSection::adafactor_eps,
            "Adafactor: added to the squared gradient (transformers' eps[0]).")
        .positive();
    s.field("adafactor_eps_scale", &TrainSection::adafactor_eps_scale,
            "Adafactor with adafactor_scale_parameter: the least parameter scale (transformers' eps[1]).")
        .positive();
    s.field("adafactor_scale_parameter", &TrainSection::adafactor_scale_parameter,
            "Adafactor: each tensor's step times max(adafactor_eps_scale, RMS of the tensor) (transformers' "
            "scale_parameter; off, as Hugging Face's Trainer sets it).");
    s.field("adafactor_relative_step", &TrainSection::adafactor_relative_step,
            "Adafactor: the step size min(1e-2, 1/sqrt(t)) at step t instead of lr and its schedule "
            "(transformers' relative_step; off, as Hugging Face's Trainer sets it). The job's lr, lr_scheduler, "
            "gamma and warmup_steps are then refused.");
    s.field("adafactor_warmup_init", &TrainSection::adafactor_warmup_init,
            "Adafactor with adafactor_relative_step: the step size min(1e-6 t, 1/sqrt(t)).");
    s.field("gamma", &TrainSection::gamma, "StepLR: the learning rate is multiplied by gamma after each epoch.")
        .require("in (0, 1]", [](double v) { return v > 0.0 && v <= 1.0; });
    s.field("lr_scheduler", &TrainSection::lr_scheduler,
            "step: StepLR with gamma per epoch; cosine: linear warmup then cosine decay to 0.");
    s.field("warmup_steps", &TrainSection::warmup_steps,
            "Linear warmup steps (cosine schedule), counted in steps of the global batch the job first started "
            "with: a run resumed at another world size ends its warmup at the same sample.")
        .at_least(0);
    s.field("seed", &TrainSection::seed,
            "Seed of random initialisation (init = \"random\", LoRA's A matrices), of the data order and of "
            "LoRA dropout.")
        .at_least(0);
    s.field("run_validation", &TrainSection::run_validation, "Evaluate on the validation data every epoch.");
    s.field("mixed_precision", &TrainSection::mixed_precision,
            "Compute in bf16 (or fp16 with use_fp16) with fp32 master weights in the shards.");
    s.field("use_fp16", &TrainSection::use_fp16,
            "Compute in fp16 with a dynamic loss scaler instead of bf16. GPUs only.");
    s.field("pure_bf16", &TrainSection::pure_bf16, "Keep parameters and optimizer state in bf16 too.");
    s.field("freeze_layers", &TrainSection::freeze_layers, "Freeze the first num_freeze_layers blocks.");
    s.field("num_freeze_layers", &TrainSection::num_freeze_layers,
            "Blocks frozen when freeze_layers is true (the first ones); at most the model's num_hidden_layers.")
        .at_least(0);
    s.field("on_nonfinite", &TrainSection::on_nonfinite,
            "A step whose loss or gradient norm is not finite never updates the weights and never reaches a "
            "checkpoint. stop: the run ends at once with an error naming the step (exit 3, never requeued); the "
            "newest checkpoint is the last finite one. skip_step: the update is dropped, counted in "
            "metrics.jsonl (nonfinite_skips), and training goes on; max_nonfinite_skips in a row end the run "
            "as stop does.");
    s.field("max_nonfinite_skips", &TrainSection::max_nonfinite_skips,
            "on_nonfinite = \"skip_step\": this many non-finite steps in a row end the run.")
        .in_range(1, 1000000);
  }
  {
    SectionBuilder<DpoSection> s(schema, "dpo",
                                 "Direct preference optimisation ([train] objective = \"dpo\"), as TRL's DPOTrainer "
                                 "defines its losses and metrics.",
                                 &Job::dpo);
    s.field("beta", &DpoSection::beta,
            "How far the policy may move from the reference: the rewards are beta times the log-probability "
            "ratios; for ipo, the margin's target is 1 / (2 beta).")
        .positive();
    s.field("loss_type", &DpoSection::loss_type,
            "sigmoid: DPO's -log sigmoid(beta x margin); ipo: (margin - 1/(2 beta))^2 on log-probabilities "
            "averaged over each answer's tokens; hinge: max(0, 1 - beta x margin). The margin is the policy's "
            "log-probability ratio of chosen to rejected minus the reference's.");
    s.field("label_smoothing", &DpoSection::label_smoothing,
            "loss_type = \"sigmoid\": the share of pairs assumed mislabelled (conservative DPO); 0: plain DPO.")
        .require("in [0, 0.5)", [](double v) { return v >= 0.0 && v < 0.5; });
    s.field("reference", &DpoSection::reference,
            "Where the reference log-probabilities come from. base: the model with its LoRA adapters switched off "
            "(LoRA and QLoRA; nothing more in memory); model: a frozen copy of the starting weights (or of "
            "reference_model), sharded as the policy is, without gradients or optimizer state; precomputed: one "
            "pass over the pairs before training computes them once and stores them beside the token files, "
            "keyed to the data and the reference weights; training then runs no reference at all. auto: base "
            "with adapters, model without.");
    s.field("reference_model", &DpoSection::reference_model,
            "A full fine-tune's reference (reference = \"model\" or \"precomputed\"; with adapters, \"model\"): "
            "the Hugging Face folder of the reference, of the policy's shape; empty: [model] path, the weights "
            "training starts from.")
        .require("one line without control characters", is_one_line);
  }
  {
    SectionBuilder<FsdpSection> s(schema, "fsdp", "How parameters, gradients and optimizer state are sharded.",
                                  &Job::fsdp);
    s.field("sharding_strategy", &FsdpSection::sharding_strategy,
            "FULL_SHARD: shard everything, gather per unit for forward and again for backward; "
            "SHARD_GRAD_OP: keep gathered parameters from forward through backward; NO_SHARD: "
            "plain data parallel; HYBRID_SHARD: FULL_SHARD inside a shard group, replicated across groups.");
    s.field("hsdp_shard_size", &FsdpSection::hsdp_shard_size,
            "HYBRID_SHARD: ranks per shard group; must divide the world size. 0: the ranks of one node.")
        .at_least(0);
    s.field("activation_checkpointing", &FsdpSection::activation_checkpointing,
            "Recompute each block's activations in backward instead of keeping them.");
    s.field("uncheckpointed_blocks", &FsdpSection::uncheckpointed_blocks,
            "With activation_checkpointing: this many blocks, the model's last, keep their activations instead of "
            "recomputing them in backward. Each saves its recomputation (about a third of its forward and "
            "backward) for its activations' memory; shardtune plan counts both and names the most that fit. "
            "0: every block recomputes.")
        .at_least(0);
    s.field("low_cpu_fsdp", &FsdpSection::low_cpu_fsdp,
            "Build the model without weights and stream each rank only its shards, so no process holds "
            "the whole model. Also on by itself for models of low_cpu_fsdp_min_params or more.");
    s.field("low_cpu_fsdp_min_params", &FsdpSection::low_cpu_fsdp_min_params,
            "Models with at least this many parameters are loaded as with low_cpu_fsdp; 0: only when asked (or "
            "when QLoRA's base folder is stored in 4 bits, which loads only streamed).")
        .at_least(0);
    s.field("load_readers", &FsdpSection::load_readers,
            "Who reads the weight files when streaming: one rank per node (node) or world rank 0 only (rank0). "
            "Other ranks never open them.");
    s.field("checkpoint_type", &FsdpSection::checkpoint_type,
            "sharded: every rank writes its own slices; full: one consolidated file, written unit by unit.");
    s.field("save_optimizer", &FsdpSection::save_optimizer,
            "Save the optimizer's state in checkpoints (AdamW's moments, Adafactor's statistics).");
    s.field("reduce_dtype", &FsdpSection::reduce_dtype, "Dtype of gradient reduction.");
    s.field("cpu_offload", &FsdpSection::cpu_offload,
            "Keep each rank's trainable shards (the fp32 masters), their gradients and the optimizer's state in "
            "host memory (pinned on a GPU) and step the optimizer on the CPU, as FSDP's CPUOffload and "
            "ZeRO-Offload do: a gather copies the shard up, a reduction copies the gradient down. The GPU then "
            "holds only gathered units, activations and gradients in flight. On the CPU the same path runs.");
    s.field("offload_params", &FsdpSection::offload_params,
            "With cpu_offload: the frozen shards (a LoRA or QLoRA base) in host memory too, copied up for each "
            "gather.");
  }
  {
    SectionBuilder<CheckpointSection> s(schema, "checkpoint", "When checkpoints are written and resumed.",
                                        &Job::checkpoint);
    s.field("dir", &CheckpointSection::dir, "Checkpoint directory; empty: <output_dir>/checkpoints.")
        .require("one line without control characters", is_one_line);
    s.field("every_steps", &CheckpointSection::every_steps,
            "Save every this many optimizer steps; 0: only at the end and when stopped.")
        .at_least(0);
    s.field("keep_last", &CheckpointSection::keep_last,
            "Committed checkpoints kept; older ones are pruned after a new one is committed.")
        .at_least(1);
    s.field("resume", &CheckpointSection::resume,
            "auto: continue from the newest complete checkpoint; none: start fresh; or a checkpoint path.")
        .require("\"auto\", \"none\" or a checkpoint folder's path (\"Auto\", \"latest\" and other words are "
                 "not keywords)",
                 [](const std::string& v) {
                   std::string low = v;
                   for (char& ch : low) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                   const bool keyword_like = low == "auto" || low == "none" || low == "latest" || low == "newest" ||
                                             low == "last" || low == "fresh";
                   return !v.empty() && is_one_line(v) && (v == "auto" || v == "none" || !keyword_like);
                 });
    s.field("async", &CheckpointSection::async,
            "Write checkpoints in the background: at the step boundary each rank's shards (and moments) are "
            "copied to host memory, training goes on while a thread writes them, and the ranks commit at a "
            "later boundary. At most one is in flight; the next save, a stop and the end wait for it. The "
            "last step's save, and one a stop asks for, are written before going on.");
    s.field("fully_parallel", &CheckpointSection::fully_parallel,
            "Where several ranks hold the same shard (HYBRID_SHARD replicas, NO_SHARD), each writes a disjoint "
            "part of it, so that no node writes more than its share of a checkpoint; false: the replica of world "
            "rank 0 writes its shards whole while the others wait. The checkpoint holds the same either way, and "
            "a resume always reads each part once and shares it between replicas.");
    s.field("on_data_change", &CheckpointSection::on_data_change,
            "When the checkpoint to resume was trained on other data or in another order (its training tokens, "
            "train.seed, batching_strategy, context_length or sample count differ from this job's). refuse: the "
            "job stops before training, naming what changed, so that no sample is trained twice or never. "
            "new_schedule: the checkpoint's weights and optimizer state start a new run over this data from its "
            "first sample, at step 0, with the learning rate schedule from its start.");
  }
  {
    SectionBuilder<MetricsSection> s(schema, "metrics", "What the job reports.", &Job::metrics);
    s.field("log_every_steps", &MetricsSection::log_every_steps, "Progress line every this many steps.")
        .at_least(1);
    s.field("jsonl", &MetricsSection::jsonl,
            "Write <output_dir>/metrics.jsonl: per step the loss, learning rate, gradient norm, tokens/s, "
            "step time split into compute, communication wait and data wait, MFU and peak memory; per "
            "validation its loss and perplexity (docs/metrics.md).");
    s.field("peak_tflops", &MetricsSection::peak_tflops,
            "Peak TFLOP/s of one rank's device, for MFU. 0: a GPU's dense bf16 peak from shardtune's table "
            "of data-sheet figures; on the CPU, no MFU.")
        .in_range(0.0, 1e6);
    s.field("save_metrics", &MetricsSection::save_metrics,
            "Also write <output_dir>/metrics_data.json in llama-recipes' layout (train_step_loss, "
            "train_epoch_loss, train_epoch_perplexity, val_epoch_loss, ...), after each validation and at "
            "the end. Needs jsonl = true.");
    s.field("use_profiler", &MetricsSection::use_profiler,
            "Profile training steps with LibTorch's profiler and write a Chrome trace per rank "
            "(<profiler_dir>/rank-NNNNN.trace.json; opens in Perfetto) with FSDP's all-gathers and "
            "reduce-scatters, forward and backward per unit, the optimizer step, data waits and checkpoint "
            "saves marked.");
    s.field("profiler_dir", &MetricsSection::profiler_dir, "Where the traces go. Default: <output_dir>/profiler.")
        .require("a path on one line", [](const std::string& v) { return is_one_line(v); });
    s.field("profiler_wait_steps", &MetricsSection::profiler_wait_steps,
            "Steps of the run before the profiler starts (torch.profiler.schedule's wait).")
        .in_range(0, 1000000);
    s.field("profiler_warmup_steps", &MetricsSection::profiler_warmup_steps,
            "Steps profiled and discarded before the traced ones (schedule's warmup).")
        .in_range(0, 1000);
    s.field("profiler_active_steps", &MetricsSection::profiler_active_steps, "Steps traced (schedule's active).")
        .in_range(1, 100);
    s.field("flop_counter", &MetricsSection::flop_counter,
            "Count the FLOPs of one step's matrix products as LibTorch multiplies them, and log them with "
            "the 6·N + 12·L·d·T estimate MFU uses (also counted_flops in that step's metrics record).");
    s.field("flop_counter_start", &MetricsSection::flop_counter_start,
            "Steps of the run before the counted one (llama-recipes' flop_counter_start).")
        .in_range(0, 1000000);
    s.field("sample_ids", &MetricsSection::sample_ids,
            "Record in each step's metrics.jsonl record the dataset index of every sample each rank trained "
            "(sample_ids, one list per rank), to check that a run trains every sample exactly once. Large: "
            "for debugging and tests. Needs jsonl = true.");
    s.field("tensorboard", &MetricsSection::tensorboard,
            "Also write TensorBoard event files under <output_dir>/tensorboard/ (rank 0): every per-step and "
            "validation figure of metrics.jsonl as a scalar, tagged train/..., perf/... and val/...; a resumed "
            "run adds a file (docs/metrics.md).");
  }
  return schema;
}

}  // namespace

const std::vector<SectionSpec>& job_schema() {
  static const std::vector<SectionSpec> schema = build_schema();
  return schema;
}

const SectionSpec* find_section(std::string_view name) {
  for (const SectionSpec& s : job_schema())
    if (s.name == name) return &s;
  return nullptr;
}

const FieldSpec* find_field(std::string_view section, std::string_view key) {
  const SectionSpec* s = find_section(section);
  if (s == nullptr) return nullptr;
  for (const FieldSpec& f : s->fields)
    if (f.key == key) return &f;
  return nullptr;
}

std::optional<std::string> foreign_key_hint(std::string_view section, std::string_view key) {
  struct Foreign {
    std::string_view section, key, hint;
  };
  // llama-recipes' train_config and lora_config names, wherever a user copying a recipe puts them.
  static constexpr Foreign kForeign[] = {
      {"train", "use_peft", "llama-recipes' use_peft is [peft] method here: method = \"lora\" (or \"none\")"},
      {"train", "peft_method", "llama-recipes' peft_method is [peft] method here (\"lora\" or \"none\")"},
      {"train", "from_peft_checkpoint", "llama-recipes' from_peft_checkpoint is [peft] from_peft_checkpoint here"},
      {"train", "enable_fsdp", "FSDP is always on here: choose how with [fsdp] sharding_strategy"},
      {"train", "low_cpu_fsdp", "llama-recipes' low_cpu_fsdp is [fsdp] low_cpu_fsdp here"},
      {"train", "use_fast_kernels", "attention uses LibTorch's fused kernels by itself here; remove the key"},
      {"train", "save_metrics", "llama-recipes' save_metrics is [metrics] save_metrics here"},
      {"train", "use_profiler", "llama-recipes' use_profiler is [metrics] use_profiler here"},
      {"train", "profiler_dir", "llama-recipes' profiler_dir is [metrics] profiler_dir here"},
      {"train", "flop_counter", "llama-recipes' flop_counter is [metrics] flop_counter here"},
      {"train", "flop_counter_start", "llama-recipes' flop_counter_start is [metrics] flop_counter_start here"},
      {"train", "quantization", "llama-recipes' quantization = \"4bit\" is [peft] method = \"qlora\" here"},
      {"peft", "load_in_4bit", "bitsandbytes' 4-bit base is [peft] method = \"qlora\" here"},
      {"peft", "bnb_4bit_quant_type", "the 4-bit type is always nf4 here: remove the key"},
      {"peft", "bnb_4bit_use_double_quant", "bitsandbytes' bnb_4bit_use_double_quant is [peft] nf4_double_quant here"},
      {"peft", "bnb_4bit_compute_dtype", "the compute dtype follows [train] mixed_precision and pure_bf16 here"},
      {"peft", "bnb_4bit_quant_storage",
       "NF4 is stored as byte records that FSDP shards whatever their dtype: there is no storage dtype to choose"},
      {"peft", "use_peft", "llama-recipes' use_peft is [peft] method here: method = \"lora\" (or \"none\")"},
      {"peft", "peft_method", "llama-recipes' peft_method is [peft] method here (\"lora\" or \"none\")"},
      {"peft", "r", "PEFT's r is [peft] lora_r here"},
      {"peft", "bias", "only bias = \"none\" is supported (no trained biases): remove the key"},
      {"peft", "task_type", "the task is always CAUSAL_LM: remove the key"},
      // TRL's DPOConfig and DPOTrainer names.
      {"train", "beta", "DPO's beta is [dpo] beta here"},
      {"train", "loss_type", "DPO's loss_type is [dpo] loss_type here"},
      {"train", "label_smoothing", "DPO's label_smoothing is [dpo] label_smoothing here"},
      {"dpo", "precompute_ref_log_probs", "TRL's precompute_ref_log_probs = true is reference = \"precomputed\" here"},
      {"dpo", "precompute_ref_batch_size", "the reference pass takes [train] val_batch_size pairs per rank here"},
      {"dpo", "ref_model", "TRL's ref_model is reference = \"model\" with reference_model = its folder here"},
      {"dpo", "ref_adapter_name", "reference = \"base\" is the model with its adapters switched off here"},
      {"dpo", "model_adapter_name", "a job trains one adapter: remove the key"},
      {"dpo", "force_use_ref_model", "reference = \"model\" uses a frozen copy even with adapters here"},
      {"dpo", "reference_free", "a DPO job always has a reference here: choose it with reference"},
      {"dpo", "max_length", "the longest sequence of a pair is [train] context_length here"},
      {"dpo", "max_prompt_length",
       "a pair longer than [train] context_length loses the start of its prompt first, down to half the context, "
       "then the end of its answers (docs/dpo.md): there is no key"},
      {"dpo", "max_completion_length",
       "a pair longer than [train] context_length loses the start of its prompt first, down to half the context, "
       "then the end of its answers (docs/dpo.md): there is no key"},
      {"dpo", "truncation_mode",
       "a pair longer than [train] context_length loses the start of its prompt first, down to half the context, "
       "then the end of its answers (docs/dpo.md): there is no key"},
      {"dpo", "learning_rate", "the learning rate is [train] lr here"},
      {"dpo", "disable_dropout", "the only dropout is LoRA's: [peft] lora_dropout = 0 turns it off"},
      {"dpo", "padding_value", "pairs are padded with the tokenizer's EOS, which no loss sees: remove the key"},
      {"dpo", "label_pad_token_id", "padding never carries a loss here: remove the key"},
      {"dpo", "rpo_alpha", "RPO's added NLL term is not supported: remove the key"},
      {"dpo", "ld_alpha", "LD-DPO is not supported: remove the key"},
      {"dpo", "f_divergence_type", "only the reverse KL divergence (DPO's) is supported: remove the key"},
      {"dpo", "sync_ref_model", "the reference stays the starting weights here: remove the key"},
      {"dpo", "use_weighting", "WPO's weighting is not supported: remove the key"},
      {"dpo", "loss_weights", "one loss_type at a time here: remove the key"},
  };
  for (const Foreign& f : kForeign)
    if (f.section == section && f.key == key) return std::string(f.hint);
  return std::nullopt;
}

std::vector<DataSource> data_sources(const Job& job) {
  if (!job.data_sources.empty()) return job.data_sources;
  return {DataSource{"", 1.0, job.data}};
}

DpoReference dpo_reference(const Job& job) {
  if (job.dpo.reference != DpoReference::kAuto) return job.dpo.reference;
  return job.peft.adapters() ? DpoReference::kBase : DpoReference::kModel;
}

int64_t shard_group_size(const FsdpSection& fsdp, int64_t world_size, int64_t ranks_per_node) {
  switch (fsdp.sharding_strategy) {
    case ShardingStrategy::kNoShard: return 1;
    case ShardingStrategy::kHybridShard: return fsdp.hsdp_shard_size > 0 ? fsdp.hsdp_shard_size : ranks_per_node;
    default: return world_size;
  }
}

int64_t shard_group_size(const Job& job) {
  return shard_group_size(job.fsdp, job.slurm.world_size(), job.slurm.ranks_per_node());
}

Precision precision(const TrainSection& train, const FsdpSection& fsdp, bool lora) {
  using common::Dtype;
  Precision p;
  const Dtype wire = fsdp.reduce_dtype == Dtype::kBF16 ? Dtype::kBF16 : Dtype::kF32;
  if (train.pure_bf16) {
    p = {Dtype::kBF16, Dtype::kBF16, wire, Dtype::kBF16};
  } else if (train.mixed_precision) {
    p = {Dtype::kF32, train.use_fp16 ? Dtype::kF16 : Dtype::kBF16, wire, Dtype::kF32};
  }
  p.frozen = lora ? p.compute : p.master;
  return p;
}

}  // namespace shardtune::job
