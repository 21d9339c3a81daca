// The job schema: defaults, precedence (--set > file > defaults), the resolved job round trip,
// cross-field rules with their positions, and the generated reference page.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/job/job_checks.h"
#include "common/job/job_loader.h"
#include "common/job/job_writer.h"
#include "common/job/no_effect.h"
#include "common/job/schema.h"
#include "common/job/slurm_time.h"

namespace shardtune::job {
namespace {

constexpr const char* kMinimal = R"([job]
name = "t"

[model]
preset = "tiny"
init = "random"
)";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

LoadedJob parse_ok(const std::string& text, const std::vector<std::string>& overrides = {}) {
  LoadedJob loaded = parse_job(text, "job.toml", overrides);
  EXPECT_FALSE(loaded.diagnostics.has_errors()) << loaded.diagnostics.to_string();
  return loaded;
}

TEST(JobSchema, DefaultsAreLlamaRecipesDefaults) {
  const Job job = parse_ok(kMinimal).job;
  EXPECT_EQ(job.train.batch_size_training, 4);
  EXPECT_EQ(job.train.context_length, 4096);
  EXPECT_EQ(job.train.gradient_accumulation_steps, 1);
  EXPECT_DOUBLE_EQ(job.train.lr, 1e-4);
  EXPECT_DOUBLE_EQ(job.train.gamma, 0.85);
  EXPECT_EQ(job.train.seed, 42);
  EXPECT_EQ(job.train.num_epochs, 3);
  EXPECT_TRUE(job.train.mixed_precision);
  EXPECT_EQ(job.train.batching_strategy, BatchingStrategy::kPacking);
  EXPECT_EQ(job.fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(job.fsdp.checkpoint_type, CheckpointType::kSharded);
  // Defaults that depend on other fields.
  EXPECT_EQ(job.job.output_dir, "runs/t");
  EXPECT_EQ(job.checkpoint.dir, "runs/t/checkpoints");
  EXPECT_EQ(job.slurm.ntasks_per_node, 1);
}

TEST(JobSchema, OverridesBeatTheFileWhichBeatsDefaults) {
  const std::string text = std::string(kMinimal) + "\n[train]\nlr = 3e-4\nseed = 7\n";
  const LoadedJob loaded = parse_ok(text, {"train.lr=5e-5", "job.name=renamed", "fsdp.sharding_strategy=NO_SHARD",
                                           "peft.method=lora", "peft.target_modules=[\"q_proj\", \"k_proj\"]"});
  EXPECT_DOUBLE_EQ(loaded.job.train.lr, 5e-5);  // --set
  EXPECT_EQ(loaded.job.train.seed, 7);           // file
  EXPECT_EQ(loaded.job.train.num_epochs, 3);     // default
  EXPECT_EQ(loaded.job.job.name, "renamed");     // bare word for a string field
  EXPECT_EQ(loaded.job.fsdp.sharding_strategy, ShardingStrategy::kNoShard);
  EXPECT_EQ(loaded.job.peft.target_modules, (std::vector<std::string>{"q_proj", "k_proj"}));
  EXPECT_EQ(loaded.sources.at("train.lr").file, "--set train.lr=5e-5");
  EXPECT_EQ(loaded.sources.at("train.seed").line, 10);
}

// LoRA's keys: each takes effect with method = "lora"; given a value of its own under method =
// "none", which would ignore it, it is refused. The resolved job of a full fine-tune (every key at
// its default) loads clean.
TEST(JobSchema, LoraKeysWithoutLoraAreRefusedAndLlamaRecipesSpellingsNameTheKeyToUse) {
  for (const std::string& key : {"lora_r = 4", "lora_alpha = 8.0", "lora_dropout = 0.1",
                                 "target_modules = [\"q_proj\"]", "from_peft_checkpoint = \"adapter\""}) {
    const LoadedJob loaded = parse_job(std::string(kMinimal) + "\n[peft]\n" + key + "\n", "job.toml", {});
    const std::string out = loaded.diagnostics.to_string();
    EXPECT_NE(out.find("is set but [peft] method is \"none\", full fine-tuning, which would ignore it"),
              std::string::npos)
        << key << ": " << out;
    EXPECT_NE(out.find("job.toml:9:"), std::string::npos) << "not at the key's line: " << out;
    parse_ok(std::string(kMinimal) + "\n[peft]\nmethod = \"lora\"\n" + key + "\n");
  }
  const Job defaults = parse_ok(kMinimal).job;
  parse_ok(to_toml(defaults));

  const LoadedJob freeze =
      parse_job(std::string(kMinimal) + "\n[peft]\nmethod = \"lora\"\n[train]\nfreeze_layers = true\n", "job.toml", {});
  EXPECT_NE(freeze.diagnostics.to_string().find("LoRA freezes the whole base model already"), std::string::npos)
      << freeze.diagnostics.to_string();

  const LoadedJob unknown = parse_job(std::string(kMinimal) + "\n[peft]\nmethod = \"lora\"\ntarget_modules = [\"qkv\"]\n",
                                      "job.toml", {});
  EXPECT_NE(unknown.diagnostics.to_string().find("a non-empty list of q_proj, k_proj"), std::string::npos)
      << unknown.diagnostics.to_string();

  const LoadedJob recipes = parse_job(std::string(kMinimal) + "\n[train]\nuse_peft = true\npeft_method = \"lora\"\n",
                                      "job.toml", {"peft.r=8"});
  const std::string out = recipes.diagnostics.to_string();
  EXPECT_NE(out.find("train.use_peft: unknown key in [train]: llama-recipes' use_peft is [peft] method here"),
            std::string::npos) << out;
  EXPECT_NE(out.find("train.peft_method: unknown key in [train]: llama-recipes' peft_method is [peft] method"),
            std::string::npos) << out;
  EXPECT_NE(out.find("--set peft.r=8: error: peft.r: unknown key in [peft]: PEFT's r is [peft] lora_r here"),
            std::string::npos) << out;
}

// Adafactor's keys take effect only with optimizer = "adafactor" and are refused under another;
// warmup_init needs relative_step, and a relative step refuses the learning rate and schedule it
// would ignore. The resolved job of an Adafactor run loads clean.
TEST(JobSchema, AdafactorKeysTakeEffectOnlyWithAdafactorAndARelativeStepRefusesTheSchedule) {
  const std::string train = std::string(kMinimal) + "\n[train]\n";
  const LoadedJob a = parse_ok(train + "optimizer = \"adafactor\"\nadafactor_beta1 = 0.9\nadafactor_decay_rate = -0.5\n");
  EXPECT_EQ(a.job.train.optimizer, Optimizer::kAdafactor);
  EXPECT_DOUBLE_EQ(a.job.train.adafactor_beta1, 0.9);
  EXPECT_DOUBLE_EQ(a.job.train.adafactor_decay_rate, -0.5);
  EXPECT_FALSE(a.job.train.adafactor_relative_step);
  EXPECT_FALSE(a.job.train.adafactor_scale_parameter);
  parse_ok(to_toml(a.job));

  for (const char* key : {"adafactor_beta1 = 0.5", "adafactor_scale_parameter = true", "adafactor_eps = 1e-20"}) {
    const std::string out = parse_job(train + key + "\n", "job.toml", {}).diagnostics.to_string();
    EXPECT_NE(out.find("is set but optimizer is \"adamw\", which does not read it: set optimizer = \"adafactor\""),
              std::string::npos) << key << ": " << out;
    EXPECT_NE(out.find("job.toml:9:"), std::string::npos) << "not at the key's line: " << out;
  }
  const std::string warmup =
      parse_job(train + "optimizer = \"adafactor\"\nadafactor_warmup_init = true\n", "job.toml", {}).diagnostics.to_string();
  EXPECT_NE(warmup.find("it needs adafactor_relative_step = true"), std::string::npos) << warmup;
  for (const char* key : {"lr = 0.001", "lr_scheduler = \"cosine\"", "warmup_steps = 5", "gamma = 0.5"}) {
    const std::string out =
        parse_job(train + "optimizer = \"adafactor\"\nadafactor_relative_step = true\n" + key + "\n", "job.toml", {})
            .diagnostics.to_string();
    EXPECT_NE(out.find("adafactor_relative_step = true computes each step's size itself"), std::string::npos)
        << key << ": " << out;
  }
  parse_ok(train + "optimizer = \"adafactor\"\nadafactor_relative_step = true\nadafactor_warmup_init = true\n");
  for (const char* bad : {"adafactor_beta1 = 1.0", "adafactor_decay_rate = 0.5", "adafactor_clip_threshold = 0.0"})
    EXPECT_TRUE(parse_job(train + "optimizer = \"adafactor\"\n" + bad + "\n", "job.toml", {}).diagnostics.has_errors())
        << bad;
}

// QLoRA: method = "qlora" with its NF4 keys; those keys under another method, block sizes
// bitsandbytes does not have, and bitsandbytes' own spellings are refused naming the key to use.
TEST(JobSchema, QloraKeysTakeEffectOnlyWithQlora) {
  const LoadedJob q = parse_ok(std::string(kMinimal) + "\n[peft]\nmethod = \"qlora\"\nnf4_block_size = 128\n"
                                                       "nf4_double_quant = false\n");
  EXPECT_EQ(q.job.peft.method, PeftMethod::kQlora);
  EXPECT_TRUE(q.job.peft.adapters());
  EXPECT_EQ(q.job.peft.nf4_block_size, 128);
  EXPECT_FALSE(q.job.peft.nf4_double_quant);
  const LoadedJob defaults = parse_ok(std::string(kMinimal) + "\n[peft]\nmethod = \"qlora\"\n");
  EXPECT_EQ(defaults.job.peft.nf4_block_size, 64);
  EXPECT_TRUE(defaults.job.peft.nf4_double_quant);

  for (const char* method : {"lora", "none"}) {
    const LoadedJob other = parse_job(std::string(kMinimal) + "\n[peft]\nmethod = \"" + method +
                                          "\"\nnf4_block_size = 128\n",
                                      "job.toml", {});
    const std::string out = other.diagnostics.to_string();
    EXPECT_TRUE(other.diagnostics.has_errors()) << method;
    EXPECT_NE(out.find(std::string("nf4_block_size = 128 is set but [peft] method is \"") + method), std::string::npos)
        << out;
  }
  const LoadedJob odd =
      parse_job(std::string(kMinimal) + "\n[peft]\nmethod = \"qlora\"\nnf4_block_size = 48\n", "job.toml", {});
  EXPECT_NE(odd.diagnostics.to_string().find("32, 64, 128, 256, 512, 1024, 2048 or 4096"), std::string::npos)
      << odd.diagnostics.to_string();
  const LoadedJob bnb = parse_job(std::string(kMinimal) + "\n[peft]\nmethod = \"qlora\"\nload_in_4bit = true\n"
                                                          "bnb_4bit_use_double_quant = true\n[train]\nquantization = \"4bit\"\n",
                                  "job.toml", {});
  const std::string out = bnb.diagnostics.to_string();
  EXPECT_NE(out.find("peft.load_in_4bit: unknown key in [peft]: bitsandbytes' 4-bit base is [peft] method = \"qlora\""),
            std::string::npos) << out;
  EXPECT_NE(out.find("is [peft] nf4_double_quant here"), std::string::npos) << out;
  EXPECT_NE(out.find("llama-recipes' quantization = \"4bit\" is [peft] method = \"qlora\" here"), std::string::npos)
      << out;
  const LoadedJob frozen = parse_job(std::string(kMinimal) + "\n[peft]\nmethod = \"qlora\"\n[train]\nfreeze_layers = true\n",
                                     "job.toml", {});
  EXPECT_NE(frozen.diagnostics.to_string().find("with [peft] method = \"qlora\": LoRA freezes"), std::string::npos)
      << frozen.diagnostics.to_string();
}

// A key set where another key makes it meaningless is warned about, naming both; the job still loads.
TEST(JobSchema, KeysWithoutEffectAreWarnedAbout) {
  const LoadedJob loaded = parse_job(std::string(kMinimal) +
                                         "\n[train]\nlr_scheduler = \"step\"\nwarmup_steps = 5\n"
                                         "gradient_clipping_threshold = 0.5\nnum_freeze_layers = 2\n"
                                         "run_validation = false\nmax_eval_step = 3\n",
                                     "job.toml", {});
  const std::string out = loaded.diagnostics.to_string();
  EXPECT_FALSE(loaded.diagnostics.has_errors()) << out;
  for (const char* want : {"warmup_steps = 5 has no effect: lr_scheduler is \"step\"",
                           "gradient_clipping_threshold = 0.5 has no effect: gradient_clipping is false",
                           "num_freeze_layers = 2 has no effect: freeze_layers is false",
                           "max_eval_step = 3 has no effect: run_validation is false"})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  // The same keys where they take effect, and a resolved job spelling out every default: no warning.
  EXPECT_EQ(parse_ok(std::string(kMinimal) + "\n[train]\nlr_scheduler = \"cosine\"\nwarmup_steps = 5\n")
                .diagnostics.to_string()
                .find("no effect"),
            std::string::npos);
  EXPECT_EQ(parse_ok(to_toml(parse_ok(kMinimal).job)).diagnostics.to_string().find("no effect"), std::string::npos);
}

TEST(JobSchema, BadOverridesAreReportedWithTheArgument) {
  const LoadedJob loaded =
      parse_job(kMinimal, "job.toml", {"train.lr=fast", "train.lrr=1", "trian.lr=1", "nodot=1", "train.seed=-1"});
  const std::string out = loaded.diagnostics.to_string();
  EXPECT_NE(out.find("--set train.lr=fast: error: train.lr: 'fast' is not a valid float value"), std::string::npos) << out;
  EXPECT_NE(out.find("--set train.lrr=1: error: train.lrr: unknown key in [train]; did you mean 'lr'?"),
            std::string::npos) << out;
  EXPECT_NE(out.find("--set trian.lr=1: error: trian: unknown section [trian]; did you mean 'train'?"),
            std::string::npos) << out;
  EXPECT_NE(out.find("--set nodot=1: error: expected section.key=value"), std::string::npos) << out;
  EXPECT_NE(out.find("--set train.seed=-1: error: train.seed: must be >= 0, got -1"), std::string::npos) << out;
}

TEST(JobSchema, ResolvedJobParsesBackToTheSameJob) {
  const std::string text = std::string(kMinimal) +
                           "\n[data]\nprompt_template = \"### Q:\\n{prompt}\\t\\\"x\\\"\\n### A:\"\n"
                           "[train]\nlr = 2.5e-5\nweight_decay = 0.1\n[slurm]\nextra_sbatch_options = [\"--comment=a_b\"]\n";
  const Job job = parse_ok(text).job;
  const std::string resolved = to_toml(job);
  const Job again = parse_ok(resolved).job;
  EXPECT_EQ(to_toml(again), resolved);
  EXPECT_EQ(again.data.prompt_template, "### Q:\n{prompt}\t\"x\"\n### A:");
  EXPECT_DOUBLE_EQ(again.train.lr, 2.5e-5);
  // Every field of the schema appears in the resolved job.
  for (const SectionSpec& s : job_schema())
    for (const FieldSpec& f : s.fields) EXPECT_NE(resolved.find("\n" + f.key + " = "), std::string::npos) << f.dotted();
}

TEST(JobSchema, HybridShardGroupMustDivideTheWorld) {
  const std::string base = std::string(kMinimal) + "\n[slurm]\nnodes = 2\ngpus_per_node = 4\n[fsdp]\nsharding_strategy = \"HYBRID_SHARD\"\n";
  const LoadedJob by_node = parse_ok(base);
  EXPECT_EQ(shard_group_size(by_node.job), 4);  // default: the ranks of one node
  EXPECT_EQ(by_node.job.slurm.world_size(), 8);
  EXPECT_EQ(shard_group_size(parse_ok(base + "hsdp_shard_size = 2\n").job), 2);
  const LoadedJob bad = parse_job(base + "hsdp_shard_size = 3\n", "job.toml");
  EXPECT_EQ(bad.diagnostics.to_string(),
            "job.toml:13:19: error: fsdp.hsdp_shard_size: HYBRID_SHARD needs a shard group size that divides the "
            "world size: shard group 3 vs world 8 (nodes 2 x ranks per node 4)\n");
}

TEST(JobSchema, ShardGroupSizeFollowsTheStrategy) {
  Job job;
  job.slurm.nodes = 2;
  job.slurm.gpus_per_node = 8;
  job.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  EXPECT_EQ(shard_group_size(job), 16);
  job.fsdp.sharding_strategy = ShardingStrategy::kShardGradOp;
  EXPECT_EQ(shard_group_size(job), 16);
  job.fsdp.sharding_strategy = ShardingStrategy::kNoShard;
  EXPECT_EQ(shard_group_size(job), 1);
  job.fsdp.sharding_strategy = ShardingStrategy::kHybridShard;
  EXPECT_EQ(shard_group_size(job), 8);
}

TEST(JobSchema, WarningsDoNotFailTheJob) {
  const LoadedJob loaded = parse_job(std::string(kMinimal) + "\n[fsdp]\nhsdp_shard_size = 2\n", "job.toml");
  EXPECT_FALSE(loaded.diagnostics.has_errors());
  EXPECT_EQ(loaded.diagnostics.to_string(),
            "job.toml:9:19: warning: fsdp.hsdp_shard_size: hsdp_shard_size = 2 has no effect: sharding_strategy is "
            "FULL_SHARD\n");
}

TEST(JobSchema, DeviceIsAutoByDefaultAndCpuWithGpusIsWarnedAbout) {
  EXPECT_EQ(parse_ok(kMinimal).job.launch.device, Device::kAuto);
  EXPECT_EQ(parse_ok(kMinimal, {"launch.device=cuda"}).job.launch.device, Device::kCuda);
  const LoadedJob bad = parse_job(std::string(kMinimal) + "\n[launch]\ndevice = \"gpu\"\n", "job.toml");
  EXPECT_TRUE(bad.diagnostics.has_errors());
  EXPECT_NE(bad.diagnostics.to_string().find("'gpu' is not one of: auto, cuda, cpu"), std::string::npos)
      << bad.diagnostics.to_string();
  const LoadedJob idle = parse_job(std::string(kMinimal) + "\n[slurm]\ngpus_per_node = 4\n[launch]\ndevice = \"cpu\"\n",
                                   "job.toml");
  EXPECT_FALSE(idle.diagnostics.has_errors());
  EXPECT_NE(idle.diagnostics.to_string().find("the job holds GPUs it does not use"), std::string::npos)
      << idle.diagnostics.to_string();
}

TEST(JobSchema, EveryErrorIsReportedAtOnce) {
  const std::string text = "[job]\nname = \"t\"\n[model]\npreset = \"tiny\"\n[train]\nlr = -1.0\nbogus = 1\n"
                           "use_fp16 = true\npure_bf16 = true\n[fsdp]\nsharding_strategy = \"HALF_SHARD\"\n";
  const LoadedJob loaded = parse_job(text, "job.toml");
  const std::string out = loaded.diagnostics.to_string();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 5) << out;
  EXPECT_NE(out.find("job.toml:4:10: error: model.init: preset \"tiny\" has no weights"), std::string::npos) << out;
  EXPECT_NE(out.find("job.toml:6:6: error: train.lr: must be > 0, got -1.0"), std::string::npos) << out;
  EXPECT_NE(out.find("job.toml:7:1: error: train.bogus: unknown key in [train]"), std::string::npos) << out;
  EXPECT_NE(out.find("job.toml:9:13: error: train.pure_bf16: use_fp16 and pure_bf16"), std::string::npos) << out;
  EXPECT_NE(out.find("job.toml:11:21: error: fsdp.sharding_strategy: 'HALF_SHARD' is not one of"), std::string::npos)
      << out;
}

TEST(JobSchema, ExampleConfigsAreValid) {
  const std::filesystem::path dir = std::filesystem::path(ST_SOURCE_DIR) / "configs";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    ++count;
    const LoadedJob loaded = load_job_file(entry.path().string());
    EXPECT_FALSE(loaded.diagnostics.has_errors()) << loaded.diagnostics.to_string();
    EXPECT_TRUE(loaded.diagnostics.all().empty()) << "warnings in an example: " << loaded.diagnostics.to_string();
  }
  EXPECT_GE(count, 4);
}

TEST(JobSchema, ReferencePageIsGeneratedFromTheSchema) {
  const std::string committed = read_file(std::filesystem::path(ST_SOURCE_DIR) / "docs" / "job-file.md");
  EXPECT_EQ(committed, schema_markdown())
      << "docs/job-file.md is stale: regenerate it with `build/bin/shardtune schema > docs/job-file.md`";
  for (const SectionSpec& s : job_schema()) {
    EXPECT_FALSE(s.doc.empty()) << s.name;
    for (const FieldSpec& f : s.fields) EXPECT_FALSE(f.doc.empty()) << f.dotted();
  }
}

TEST(SlurmTime, EverySlurmFormatAsSlurmReadsIt) {
  auto seconds = [](const char* text) -> int64_t {
    const auto limit = parse_slurm_time(text);
    EXPECT_TRUE(limit.has_value() && !limit->unlimited) << text;
    return limit && !limit->unlimited ? limit->seconds : -1;
  };
  EXPECT_EQ(seconds("30"), 30 * 60);
  EXPECT_EQ(seconds("30:15"), 31 * 60);  // Slurm rounds seconds up to whole minutes
  EXPECT_EQ(seconds("30:00"), 30 * 60);
  EXPECT_EQ(seconds("0:01"), 60);
  EXPECT_EQ(seconds("04:00:00"), 4 * 3600);
  EXPECT_EQ(seconds("2-12"), 2 * 86400 + 12 * 3600);
  EXPECT_EQ(seconds("1-00:30"), 86400 + 30 * 60);
  EXPECT_EQ(seconds("1-02:03:04"), 86400 + 2 * 3600 + 4 * 60);
  // sbatch's "no limit": the words, -1, and every spelling of zero.
  for (const char* none : {"UNLIMITED", "unlimited", "Infinite", "INFINITE", "-1", "0", "00:00:00", "0-0", "0:0"}) {
    const auto limit = parse_slurm_time(none);
    EXPECT_TRUE(limit.has_value() && limit->unlimited) << none;
  }
  for (const char* bad : {"", "4 hours", "1:2:3:4", "-2", "1-", "a:b", "1-2:3:4:5", ":30", "99999999999", "UNLIMITEDX"})
    EXPECT_FALSE(parse_slurm_time(bad).has_value()) << bad;
}

TEST(JobSchema, NoTimeLimitNeedsNoSignalLeadAndSaysTheLeadDoesNothing) {
  for (const char* none : {"0", "UNLIMITED", "INFINITE"})
    EXPECT_FALSE(parse_ok(kMinimal, {std::string("slurm.time=") + none}).diagnostics.has_errors()) << none;
  const LoadedJob lead = parse_ok(std::string(kMinimal) + "\n[slurm]\ntime = \"UNLIMITED\"\nsignal_lead_s = 600\n");
  EXPECT_NE(lead.diagnostics.to_string().find("signal_lead_s = 600 has no effect: time = \"UNLIMITED\" asks for no "
                                              "time limit"),
            std::string::npos)
      << lead.diagnostics.to_string();
  // A limit Slurm rounds up to one minute leaves room for a 30 s lead; the lead is checked against it.
  EXPECT_FALSE(parse_job(kMinimal, "job.toml", {"slurm.time=0:10", "slurm.signal_lead_s=30"}).diagnostics.has_errors());
  EXPECT_TRUE(parse_job(kMinimal, "job.toml", {"slurm.time=1", "slurm.signal_lead_s=60"}).diagnostics.has_errors());
}

// Issue: a job without [data] format trained on synthetic tokens, ignoring its data file.
TEST(JobSchema, DataFilesWithoutAFormatAreRefused) {
  const LoadedJob unset = parse_job(kMinimal, "job.toml", {"data.train_file=a.json"});
  EXPECT_NE(unset.diagnostics.to_string().find("error: data.train_file: train_file = \"a.json\" is set, but [data] "
                                               "format is not: without one the job trains on synthetic tokens"),
            std::string::npos)
      << unset.diagnostics.to_string();
  for (const char* key : {"data.val_file=v.json", "data.tokenizer=tokenizer.json"}) {
    const LoadedJob synthetic = parse_job(kMinimal, "job.toml", {"data.format=synthetic", key});
    EXPECT_NE(synthetic.diagnostics.to_string().find("is set, but format = \"synthetic\" generates its tokens and "
                                                     "reads no file"),
              std::string::npos)
        << key << ": " << synthetic.diagnostics.to_string();
  }
  parse_ok(kMinimal, {"data.format=alpaca", "data.train_file=a.json", "data.tokenizer=t.json"});
}

// checkpoint.resume: a word that reads as a keyword but is not one is refused when the job is read,
// and a path that names no committed checkpoint when it is launched (not by a requeued start).
TEST(JobSchema, ResumeKeywordsAreExactAndAPathMustBeACheckpoint) {
  for (const char* bad : {"Auto", "NONE", "latest", "newest"}) {
    const LoadedJob loaded = parse_job(kMinimal, "job.toml", {std::string("checkpoint.resume=") + bad});
    EXPECT_NE(loaded.diagnostics.to_string().find("error: checkpoint.resume:"), std::string::npos)
        << bad << ": " << loaded.diagnostics.to_string();
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "st_resume_path_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "step-0000003");
  auto launch_errors = [&](const std::string& resume) {
    LoadedJob loaded = parse_ok(kMinimal, {"checkpoint.resume=" + resume});
    check_launch_paths(loaded.job, loaded.sources, "job.toml", loaded.diagnostics);
    return loaded.diagnostics.to_string();
  };
  EXPECT_NE(launch_errors((dir / "nowhere").string()).find("no such checkpoint folder"), std::string::npos);
  EXPECT_NE(launch_errors((dir / "step-0000003").string()).find("a folder without a manifest.json"), std::string::npos);
  std::ofstream(dir / "step-0000003" / "manifest.json") << "{}";
  for (const std::string ok : {(dir / "step-0000003").string(), std::string("auto"), std::string("none")})
    EXPECT_EQ(launch_errors(ok).find("error:"), std::string::npos) << ok << ": " << launch_errors(ok);
  std::filesystem::remove_all(dir);
}

TEST(JobSchema, Fp16NeedsAGpu) {
  const LoadedJob cpu = parse_job(kMinimal, "job.toml", {"launch.device=cpu", "train.use_fp16=true"});
  EXPECT_NE(cpu.diagnostics.to_string().find("error: train.use_fp16: use_fp16 = true needs a GPU"), std::string::npos)
      << cpu.diagnostics.to_string();
  parse_ok(kMinimal, {"launch.device=cuda", "train.use_fp16=true"});
  parse_ok(kMinimal, {"launch.device=auto", "train.use_fp16=true"});  // the rank decides (fsdp_options)
}

TEST(JobSchema, APromptTemplateMustParse) {
  const std::string jsonl = "data.format=jsonl";
  for (const auto& [templ, want] :
       std::vector<std::pair<std::string, std::string>>{{"Q: {question", "the '{' at character 4 is never closed"},
                                                        {"Q: {}", "an empty placeholder '{}' at character 4"},
                                                        {"Q: }", "a lone '}' at character 4"},
                                                        {"Q: {a{b}", "the '{' at character 4 is never closed"}}) {
    const LoadedJob loaded = parse_job(kMinimal, "job.toml",
                                       {jsonl, "data.train_file=d.jsonl", "data.tokenizer=t.json",
                                        "data.prompt_template=\"" + templ + "\""});
    EXPECT_NE(loaded.diagnostics.to_string().find("error: data.prompt_template: " + want), std::string::npos)
        << templ << ": " << loaded.diagnostics.to_string();
  }
  parse_ok(kMinimal, {jsonl, "data.train_file=d.jsonl", "data.tokenizer=t.json",
                      "data.prompt_template=\"{{literal}} {question}\""});
}

// Every rule of no_effect.h, each with a job that meets its condition: the key given a value of
// its own is warned about, naming the key; under the opposite condition it is not.
TEST(JobSchema, EveryKeyWithoutEffectIsNamed) {
  struct Case {
    std::string set;                  // the key's own value
    std::vector<std::string> meets;   // overrides that meet the rule's condition
    std::vector<std::string> effect;  // overrides under which the key takes effect
  };
  const std::vector<std::string> alpaca = {"data.format=alpaca", "data.train_file=a.json", "data.tokenizer=t.json"};
  auto with = [&alpaca](std::vector<std::string> more) {
    std::vector<std::string> out = alpaca;
    out.insert(out.end(), more.begin(), more.end());
    return out;
  };
  const std::vector<Case> cases = {
      {"slurm.min_nodes=2", {"slurm.nodes=2"}, {"slurm.nodes=3"}},
      {"slurm.mail_user=a@b.c", {}, {"slurm.mail_type=END"}},
      {"slurm.signal_lead_s=600", {"slurm.time=UNLIMITED"}, {"slurm.time=04:00:00"}},
      {"launch.srun_mpi=pmi2", {"launch.launcher=mpirun"}, {}},
      {"launch.extra_srun_options=[\"--exclusive\"]", {"launch.launcher=mpirun"}, {}},
      {"launch.extra_mpirun_options=[\"-x\", \"A\"]", {}, {"launch.launcher=mpirun"}},
      {"launch.gpu_memory_gib=80", {"launch.device=cpu"}, {}},
      {"data.val_fraction=0.2", with({"data.val_file=v.json"}), alpaca},
      {"data.val_fraction=0.2", with({"train.run_validation=false"}), alpaca},
      {"data.val_file=v.json", with({"train.run_validation=false"}), alpaca},
      {"data.prompt_field=q", alpaca, {"data.format=jsonl", "data.train_file=a.json", "data.tokenizer=t.json"}},
      {"data.prompt_field=q",
       {"data.format=jsonl", "data.train_file=a.json", "data.tokenizer=t.json", "data.prompt_template=\"{x}\""},
       {"data.format=jsonl", "data.train_file=a.json", "data.tokenizer=t.json"}},
      {"data.response_field=a", with({"data.format=samsum"}),
       {"data.format=jsonl", "data.train_file=a.json", "data.tokenizer=t.json"}},
      {"data.prompt_template=\"{instruction}\"", {}, alpaca},
      {"data.prompt_template=\"{instruction}\"", {"data.format=chat", "data.train_file=c.jsonl", "data.tokenizer=t.json"},
       alpaca},
      {"data.chat_format=llama2", alpaca, {"data.format=chat", "data.train_file=c.jsonl", "data.tokenizer=t.json"}},
      {"data.train_on=all", alpaca, {"data.format=chat", "data.train_file=c.jsonl", "data.tokenizer=t.json"}},
      {"data.on_bad_record=skip", {}, alpaca},
      {"data.long_examples=truncate", {}, alpaca},
      {"data.long_examples=truncate", with({"train.batching_strategy=padding"}), alpaca},
      {"train.batching_strategy=padding", {}, alpaca},
      {"train.warmup_steps=5", {}, {"train.lr_scheduler=cosine"}},
      {"train.gamma=0.5", {"train.lr_scheduler=cosine"}, {}},
      {"train.gamma=0.5", {"train.num_epochs=1"}, {}},
      {"train.gradient_clipping_threshold=0.5", {}, {"train.gradient_clipping=true"}},
      {"train.num_freeze_layers=2", {}, {"train.freeze_layers=true"}},
      {"train.freeze_layers=true", {"train.num_freeze_layers=0"}, {}},
      {"train.val_batch_size=2", {"train.run_validation=false"}, {}},
      // DPO's precomputed reference pass takes val_batch_size pairs per rank, validation or not.
      {"train.val_batch_size=2", {"train.run_validation=false"},
       {"train.run_validation=false", "train.objective=dpo", "train.batching_strategy=padding",
        "data.format=preference", "data.train_file=p.jsonl", "data.tokenizer=t.json", "dpo.reference=precomputed"}},
      {"train.max_eval_step=2", {"train.run_validation=false"}, {}},
      {"train.max_nonfinite_skips=2", {}, {"train.on_nonfinite=skip_step"}},
      {"train.mixed_precision=false", {"train.pure_bf16=true"}, {}},
      {"fsdp.hsdp_shard_size=1", {}, {"fsdp.sharding_strategy=HYBRID_SHARD"}},
      {"fsdp.uncheckpointed_blocks=1", {"fsdp.activation_checkpointing=false"}, {}},
      {"fsdp.offload_params=true", {"fsdp.cpu_offload=true"}, {"fsdp.cpu_offload=true", "peft.method=lora"}},
      {"fsdp.offload_params=true", {"fsdp.cpu_offload=true"}, {"fsdp.cpu_offload=true", "train.freeze_layers=true"}},
      {"fsdp.low_cpu_fsdp=true", {}, {"model.preset=none", "model.path=/m", "model.init=pretrained"}},
      {"fsdp.low_cpu_fsdp_min_params=5", {}, {"model.preset=none", "model.path=/m", "model.init=pretrained"}},
      {"fsdp.load_readers=rank0",
       {"model.preset=none", "model.path=/m", "model.init=pretrained", "fsdp.low_cpu_fsdp_min_params=0"},
       {"model.preset=none", "model.path=/m", "model.init=pretrained", "fsdp.low_cpu_fsdp=true"}},
      // A QLoRA base stored in 4 bits streams whatever low_cpu_fsdp says (its folder tells).
      {"fsdp.load_readers=rank0",
       {"model.preset=none", "model.path=/m", "model.init=pretrained", "fsdp.low_cpu_fsdp_min_params=0"},
       {"model.preset=none", "model.path=/m", "model.init=pretrained", "fsdp.low_cpu_fsdp_min_params=0",
        "peft.method=qlora"}},
      {"metrics.peak_tflops=100", {"metrics.jsonl=false"}, {}},
      {"metrics.profiler_dir=/tmp/p", {}, {"metrics.use_profiler=true"}},
      {"metrics.profiler_wait_steps=4", {}, {"metrics.use_profiler=true"}},
      {"metrics.profiler_warmup_steps=4", {}, {"metrics.use_profiler=true"}},
      {"metrics.profiler_active_steps=4", {}, {"metrics.use_profiler=true"}},
      {"metrics.flop_counter_start=4", {}, {"metrics.flop_counter=true"}},
      {"fsdp.reduce_dtype=bf16", {"train.mixed_precision=false"}, {"train.mixed_precision=true"}},
      {"checkpoint.on_data_change=new_schedule", {"checkpoint.resume=none"}, {}},
      {"checkpoint.fully_parallel=false", {}, {"fsdp.sharding_strategy=NO_SHARD"}},
  };
  std::set<std::string> covered;
  for (const Case& c : cases) {
    const std::string key = c.set.substr(0, c.set.find('='));
    covered.insert(key);
    auto warned = [&](std::vector<std::string> overrides) {
      overrides.push_back(c.set);
      const LoadedJob loaded = parse_job(kMinimal, "job.toml", overrides);
      EXPECT_FALSE(loaded.diagnostics.has_errors()) << c.set << ": " << loaded.diagnostics.to_string();
      for (const Diagnostic& d : loaded.diagnostics.all())
        if (d.key == key && d.severity == Severity::kWarning && d.message.find("has no effect") != std::string::npos)
          return true;
      return false;
    };
    EXPECT_TRUE(warned(c.meets)) << c.set << " where it does nothing";
    EXPECT_FALSE(warned(c.effect)) << c.set << " where it takes effect";
  }
  for (const NoEffectRule& rule : no_effect_rules()) EXPECT_TRUE(covered.count(rule.key)) << rule.key << " has no case";
}

// Keys that count the model's blocks, against a model of 2: above it an error at the key's line,
// naming config.json's key and the bound; at the bound and below, nothing.
TEST(JobSchema, BlockCountsAreBoundByTheModel) {
  struct Case {
    const char* section;    // the lines appended to kMinimal
    const char* error;      // the diagnostics above the bound
    std::vector<std::vector<std::string>> fitting;  // overrides within it
  };
  const Case cases[] = {
      {"\n[train]\nfreeze_layers = true\nnum_freeze_layers = 50\n",
       "job.toml:10:21: error: train.num_freeze_layers: num_freeze_layers = 50 but the model has 2 blocks "
       "(num_hidden_layers in tiny): at most 2\n",
       {{"train.freeze_layers=true", "train.num_freeze_layers=2"}}},
      {"\n[fsdp]\nuncheckpointed_blocks = 3\n",
       "job.toml:9:25: error: fsdp.uncheckpointed_blocks: uncheckpointed_blocks = 3 but the model has 2 blocks "
       "(num_hidden_layers in tiny): at most 2 (all of them: the same as activation_checkpointing = false)\n",
       {{"fsdp.uncheckpointed_blocks=2"}, {"fsdp.uncheckpointed_blocks=0"}}},
  };
  for (const Case& c : cases) {
    const LoadedJob loaded = parse_ok(std::string(kMinimal) + c.section);
    Diagnostics diags;
    check_against_model(loaded.job, ModelFacts{"tiny", 2}, loaded.sources, "job.toml", diags);
    EXPECT_EQ(diags.to_string(), c.error);
    for (const std::vector<std::string>& overrides : c.fitting) {
      Diagnostics fits;
      check_against_model(parse_ok(kMinimal, overrides).job, ModelFacts{"tiny", 2}, {}, "job.toml", fits);
      EXPECT_TRUE(fits.all().empty()) << overrides.back() << ": " << fits.to_string();
    }
  }
}

}  // namespace
}  // namespace shardtune::job
