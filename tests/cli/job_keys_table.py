#!/usr/bin/env python3
"""Every key of the job file, set to a value of its own, changes something a user can see, or is
named in a warning or an error. One row per key (a few keys have two): the value, and the
observation that shows it took effect:

  script    `shardtune submit --dry-run`: the sbatch script holds a line it did not hold without it
  local     `shardtune run --dry-run`: the mpirun line holds it
  plan      `shardtune plan --json`: the memory plan differs from the plan without it
  error     `shardtune validate`: an error naming the key (exit 2)
  log       a short run's rank-0 log matches (or, with !, does not match) a pattern
  metrics   a short run's metrics.jsonl satisfies a condition
  files     a short run leaves (or, with !, does not leave) a file
  manifest  the newest checkpoint's manifest satisfies a condition
  differs   a short run's losses differ from those of a run without the key

A run names the values it sets; each row's key and value must be among them, so that a row can
only pass through its own key. The resolved job is not an observation (it echoes every key). A key
of the schema without a row fails the test: a new key needs its row.

usage: job_keys_table.py SHARDTUNE SOURCE_DIR
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

ST, SRC = sys.argv[1], sys.argv[2]
BIN = os.path.dirname(ST)
TMP = tempfile.mkdtemp(prefix="st-keys-")
TOK = "configs/data/tiny-tokenizer/tokenizer.json"
ALPACA = "configs/data/tiny-alpaca.json"

BASE = """[job]
name = "keys"
[slurm]
ntasks_per_node = 2
[launch]
device = "cpu"
[model]
preset = "tiny"
init = "random"
[train]
context_length = 32
max_train_step = 3
num_epochs = 1
[checkpoint]
every_steps = 0
"""
BASE_FILE = os.path.join(TMP, "base.toml")
open(BASE_FILE, "w").write(BASE)

FOLDER = os.path.join(TMP, "model")  # a Hugging Face folder: config.json and weights
# Two folders of one shape, a vocabulary the chat tokenizer fits, two seeds: a DPO policy and its reference.
DPO_FOLDER, DPO_FOLDER2 = os.path.join(TMP, "dpo-model"), os.path.join(TMP, "dpo-model2")
PEFT = os.path.join(TMP, "peft")  # a PEFT adapter folder, exported from the run "lora"
CKDIR = os.path.join(TMP, "ckdir")
PROFDIR = os.path.join(TMP, "prof")
ALPACA_BAD = os.path.join(TMP, "alpaca-bad.json")
SMALL = os.path.join(TMP, "small.json")
QA = os.path.join(TMP, "qa.jsonl")


def sh(args, **kw):
    return subprocess.run(args, cwd=SRC, capture_output=True, text=True, **kw)


def make_inputs():
    # Not the tiny preset, nor its initialisation: a job that ignored model.path or model.init would show.
    r = sh([os.path.join(BIN, "shardtune-make-model"), FOLDER, "--layers", "3", "--seed", "4242", "--dtype", "fp32"])
    assert r.returncode == 0, r.stderr
    for folder, seed in ((DPO_FOLDER, "5"), (DPO_FOLDER2, "6")):
        r = sh([os.path.join(BIN, "shardtune-make-model"), folder, "--vocab", "600", "--seed", seed, "--dtype", "fp32"])
        assert r.returncode == 0, r.stderr
    records = json.load(open(os.path.join(SRC, ALPACA)))
    json.dump(records + [{"instruction": "no output", "input": ""}], open(ALPACA_BAD, "w"))
    json.dump(records[:24], open(SMALL, "w"))
    with open(QA, "w") as f:
        for i in range(200):
            f.write(json.dumps({"question": f"What is {i} plus 1?", "answer": str(i + 1)}) + "\n")


def sets(*pairs):
    return [f"{k}={v}" for k, v in pairs]


ALPACA_DATA = sets(("data.format", "alpaca"), ("data.train_file", ALPACA), ("data.tokenizer", TOK))
JSONL_DATA = sets(("data.format", "jsonl"), ("data.train_file", QA), ("data.tokenizer", TOK),
                  ("data.response_field", "answer"))
CHAT_DATA = sets(("data.format", "chat"), ("data.train_file", "configs/data/tiny-chat.jsonl"),
                 ("data.tokenizer", "configs/data/tiny-chat-tokenizer/tokenizer.json"), ("train.context_length", "256"))
FROM_FOLDER = sets(("model.preset", "none"), ("model.path", FOLDER), ("model.init", "pretrained"))
LORA = sets(("peft.method", "lora"), ("train.lr", "0.01"))
DPO = sets(("train.objective", "dpo"), ("data.format", "preference"), ("data.train_file", "configs/data/tiny-preference.jsonl"),
           ("data.tokenizer", "configs/data/tiny-chat-tokenizer/tokenizer.json"), ("train.batching_strategy", "padding"),
           ("train.context_length", "64"))

# name -> (overrides, accepted exit codes, output directory of another run to start in)
RUNS = {
    "base": (sets(("metrics.sample_ids", "true")), (0,), None),
    "seed": (sets(("metrics.sample_ids", "true"), ("train.seed", "7")), (0,), None),
    "wd_ref": (sets(("train.lr", "0.01")), (0,), None),
    "weight_decay": (sets(("train.lr", "0.01"), ("train.weight_decay", "0.5")), (0,), None),
    "offload": (sets(("fsdp.cpu_offload", "true"), ("fsdp.uncheckpointed_blocks", "1")), (0,), None),
    "offload_all": (sets(("peft.method", "lora"), ("fsdp.cpu_offload", "true"), ("fsdp.offload_params", "true")), (0,), None),
    # Adafactor: each of its keys against the run without it.
    "adafactor": (sets(("train.optimizer", "adafactor")), (0,), None),
    "af_beta1": (sets(("train.optimizer", "adafactor"), ("train.adafactor_beta1", "0.9")), (0,), None),
    "af_decay": (sets(("train.optimizer", "adafactor"), ("train.adafactor_decay_rate", "-0.5")), (0,), None),
    "af_clip": (sets(("train.optimizer", "adafactor"), ("train.adafactor_clip_threshold", "0.01")), (0,), None),
    "af_eps": (sets(("train.optimizer", "adafactor"), ("train.adafactor_eps", "0.001")), (0,), None),
    "af_scale": (sets(("train.optimizer", "adafactor"), ("train.adafactor_scale_parameter", "true")), (0,), None),
    "af_eps_scale": (sets(("train.optimizer", "adafactor"), ("train.adafactor_scale_parameter", "true"),
                          ("train.adafactor_eps_scale", "10.0")), (0,), None),
    "af_relative": (sets(("train.optimizer", "adafactor"), ("train.adafactor_relative_step", "true")), (0,), None),
    "af_warmup": (sets(("train.optimizer", "adafactor"), ("train.adafactor_relative_step", "true"),
                       ("train.adafactor_warmup_init", "true")), (0,), None),
    "misc": (sets(("launch.collective_timeout_s", "77"), ("launch.threads_per_rank", "1"), ("train.gradient_accumulation_steps", "2"),
                  ("train.gradient_clipping", "true"), ("train.gradient_clipping_threshold", "0.5"),
                  ("train.num_workers_dataloader", "0"), ("train.num_epochs", "2"), ("train.lr", "0.001"),
                  ("train.lr_scheduler", "cosine"), ("train.warmup_steps", "2"), ("train.val_batch_size", "3"),
                  ("train.max_eval_step", "1"), ("train.mixed_precision", "false"),
                  ("fsdp.checkpoint_type", "full"), ("fsdp.save_optimizer", "true"), ("checkpoint.dir", CKDIR),
                  ("checkpoint.every_steps", "1"), ("checkpoint.keep_last", "1"), ("checkpoint.async", "true"),
                  ("metrics.log_every_steps", "1"),
                  ("metrics.peak_tflops", "100"), ("metrics.save_metrics", "true"), ("metrics.flop_counter", "true"),
                  ("metrics.flop_counter_start", "1"), ("metrics.tensorboard", "true")), (0,), None),
    "epoch_samples": (sets(("data.samples_per_epoch", "20")), (0,), None),
    "precision": (sets(("train.pure_bf16", "true"), ("train.freeze_layers", "true"), ("train.num_freeze_layers", "2"),
                       ("train.max_train_step", "2"), ("train.lr_scheduler", "cosine")), (0,), None),
    "nonfinite": (sets(("train.lr", "1e30"), ("train.on_nonfinite", "skip_step")), (0, 3), None),
    "nonfinite2": (sets(("train.lr", "1e30"), ("train.on_nonfinite", "skip_step"), ("train.max_nonfinite_skips", "1")),
                   (3,), None),
    "quiet": (sets(("metrics.jsonl", "false"), ("train.run_validation", "false")), (0,), None),
    "profiler": (sets(("metrics.use_profiler", "true"), ("metrics.profiler_dir", PROFDIR),
                      ("metrics.profiler_wait_steps", "0"), ("metrics.profiler_warmup_steps", "0"),
                      ("metrics.profiler_active_steps", "2")), (0,), None),
    "resume_first": ([], (0,), None),
    "one_writer": (sets(("fsdp.sharding_strategy", "NO_SHARD"), ("checkpoint.fully_parallel", "false")), (0,), None),
    "resume_none": (sets(("checkpoint.resume", "none")), (0,), "resume_first"),
    "data_first": ([], (0,), None),
    "data_change": (sets(("train.seed", "7"), ("checkpoint.on_data_change", "new_schedule")), (0,), "data_first"),
    # tiny-alpaca's prompts are 61 to 71 tokens: at 72, truncation keeps a response token of each.
    "alpaca": (ALPACA_DATA + sets(("data.val_fraction", "0.2"), ("train.context_length", "72")), (0,), None),
    "alpaca_trunc": (ALPACA_DATA + sets(("data.val_fraction", "0.2"), ("train.context_length", "72"),
                                        ("data.long_examples", "truncate")), (0,), None),
    "alpaca_valfile": (ALPACA_DATA + sets(("data.val_file", ALPACA)), (0,), None),
    "padding": (ALPACA_DATA + sets(("data.train_file", ALPACA_BAD), ("data.on_bad_record", "skip"),
                                   ("train.batching_strategy", "padding"), ("train.context_length", "128")), (0,), None),
    "jsonl": (JSONL_DATA + sets(("data.prompt_field", "question")), (0,), None),
    "jsonl_template": (JSONL_DATA + sets(("data.prompt_template", '"Question: {question}\\nAnswer: "')), (0,), None),
    "gamma": (ALPACA_DATA + sets(("data.train_file", SMALL), ("data.val_fraction", "0"),
                                 ("train.batching_strategy", "padding"), ("train.context_length", "128"),
                                 ("train.lr_scheduler", "step"), ("train.gamma", "0.5"), ("train.num_epochs", "2"),
                                 ("train.max_train_step", "0"), ("train.run_validation", "false")), (0,), None),
    "chat": (CHAT_DATA, (0,), None),
    "chat_llama3": (CHAT_DATA + sets(("data.chat_format", "llama3")), (0,), None),
    "chat_all": (CHAT_DATA + sets(("data.train_on", "all")), (0,), None),
    "folder": (FROM_FOLDER, (0,), None),
    "folder_random": (FROM_FOLDER + sets(("model.init", "random")), (0,), None),
    "stream": (FROM_FOLDER + sets(("fsdp.low_cpu_fsdp", "true")), (0,), None),
    "stream_min": (FROM_FOLDER + sets(("fsdp.low_cpu_fsdp_min_params", "1")), (0,), None),
    "stream_rank0": (FROM_FOLDER + sets(("fsdp.low_cpu_fsdp", "true"), ("fsdp.load_readers", "rank0")), (0,), None),
    "lora": (LORA, (0,), None),
    "lora_alpha": (LORA + sets(("peft.lora_alpha", "8")), (0,), None),
    "lora_dropout": (LORA + sets(("peft.lora_dropout", "0.5")), (0,), None),
    "from_peft": (LORA + sets(("peft.from_peft_checkpoint", PEFT)), (0,), None),
    # DPO: LoRA against its base, and full fine-tuning against a frozen copy.
    "dpo": (DPO + LORA, (0,), None),
    "dpo_beta": (DPO + LORA + sets(("dpo.beta", "0.5")), (0,), None),
    "dpo_ipo": (DPO + LORA + sets(("dpo.loss_type", "ipo")), (0,), None),
    "dpo_smoothing": (DPO + LORA + sets(("dpo.label_smoothing", "0.3")), (0,), None),
    "dpo_copy": (DPO + LORA + sets(("dpo.reference", "model")), (0,), None),
    "dpo_full": (DPO + sets(("model.preset", "none"), ("model.path", DPO_FOLDER), ("model.init", "pretrained")), (0,), None),
    "dpo_other": (DPO + sets(("model.preset", "none"), ("model.path", DPO_FOLDER), ("model.init", "pretrained"),
                             ("dpo.reference_model", DPO_FOLDER2)), (0,), None),
}

ROWS = [
    # key, value, kind, details
    ("job.name", "renamed", "script", "--job-name=renamed"),
    ("job.output_dir", "/tmp/st-keys-elsewhere", "script", "--output=/tmp/st-keys-elsewhere/slurm-%j.out"),
    ("slurm.nodes", "3", "script", "--nodes=3"),
    ("slurm.min_nodes", "1", "script", "--nodes=1-2", ["slurm.nodes=2"]),
    ("slurm.gpus_per_node", "2", "script", "--gpus-per-node=2"),
    ("slurm.ntasks_per_node", "3", "script", "--ntasks-per-node=3"),
    ("slurm.cpus_per_task", "4", "script", "export SRUN_CPUS_PER_TASK=4"),
    ("slurm.partition", "gpu", "script", "--partition=gpu"),
    ("slurm.account", "proj", "script", "--account=proj"),
    ("slurm.qos", "high", "script", "--qos=high"),
    ("slurm.time", "01:00:00", "script", "--time=01:00:00"),
    ("slurm.constraint", "h100", "script", "--constraint=h100"),
    ("slurm.exclusive", "true", "script", "#SBATCH --exclusive"),
    ("slurm.mail_user", "a@b.c", "script", "--mail-user=a@b.c", ["slurm.mail_type=END"]),
    ("slurm.mail_type", "END", "script", "--mail-type=END"),
    ("slurm.extra_sbatch_options", '["--reservation=r"]', "script", "#SBATCH --reservation=r"),
    ("slurm.signal_lead_s", "120", "script", "--signal=B:USR1@120"),
    ("slurm.max_requeues", "7", "script", "MAX_REQUEUES=7"),
    ("launch.launcher", "mpirun", "script", "ranks=( mpirun -np"),
    ("launch.srun_mpi", "pmi2", "script", "--mpi=pmi2"),
    ("launch.extra_srun_options", '["--exclusive"]', "script", "'--exclusive' "),
    ("launch.extra_mpirun_options", '["-x", "ST_KEYS=1"]', "local", " -x ST_KEYS=1 "),
    ("launch.collective_timeout_s", "77", "log", ("misc", r"collective timeout 77 s")),
    ("launch.device", "cuda", "plan", []),
    ("launch.gpu_memory_gib", "80", "plan", ["launch.device=cuda"]),
    ("launch.threads_per_rank", "1", "log", ("misc", r"CPU threads: 1 per rank \(\[launch\] threads_per_rank\)")),
    ("model.path", FOLDER, "plan", ["model.preset=none"], []),
    ("model.preset", "tiny", "plan", [], ["model.preset=none", f"model.path={FOLDER}"]),
    ("model.init", "random", "differs", ("folder_random", "folder")),
    ("peft.method", "lora", "plan", []),
    ("peft.lora_r", "4", "plan", ["peft.method=lora"]),
    ("peft.lora_alpha", "8", "differs", ("lora_alpha", "lora")),
    ("peft.lora_dropout", "0.5", "differs", ("lora_dropout", "lora")),
    ("peft.target_modules", '["q_proj", "k_proj", "v_proj"]', "plan", ["peft.method=lora"]),
    ("peft.from_peft_checkpoint", PEFT, "log", ("from_peft", "LoRA adapters from " + re.escape(PEFT))),
    ("peft.nf4_block_size", "128", "plan", ["peft.method=qlora"]),
    ("peft.nf4_double_quant", "false", "plan", ["peft.method=qlora"]),
    ("data.format", "alpaca", "log", ("alpaca", r"training data: \d+ examples")),
    ("data.train_file", "a.json", "error", []),
    ("data.val_file", ALPACA, "log", ("alpaca_valfile", r"validation data: 2000 examples")),
    ("data.val_fraction", "0.2", "log", ("alpaca", r"training data: 1600 examples")),
    ("data.tokenizer", "t.json", "error", []),
    ("data.prompt_field", "question", "log", ("jsonl", r"training data: 190 examples")),
    ("data.response_field", "answer", "log", ("jsonl", r"training data: 190 examples")),
    ("data.prompt_template", '"Question: {question}\\nAnswer: "', "differs",
     ("jsonl_template", "jsonl", r"training data: \d+ examples, (\d+) tokens")),
    ("data.on_bad_record", "skip", "log", ("padding", r"skipped 1 bad record\(s\)")),
    ("data.long_examples", "truncate", "differs", ("alpaca_trunc", "alpaca", r"packed into (\d+) rows")),
    # Llama 3 has no system turn of its own where 3.1 (the tokenizer's template) writes one.
    ("data.chat_format", "llama3", "differs", ("chat_llama3", "chat", r"training data: \d+ examples, (\d+) tokens")),
    ("data.train_on", "all", "differs", ("chat_all", "chat", r"tokens \((\d+) learned")),
    ("train.objective", "dpo", "metrics", ("dpo", "'rewards/margins' in steps[0] and 'rewards/accuracies' in steps[-1]")),
    ("dpo.beta", "0.5", "differs", ("dpo_beta", "dpo")),
    ("dpo.loss_type", "ipo", "differs", ("dpo_ipo", "dpo")),
    ("dpo.label_smoothing", "0.3", "differs", ("dpo_smoothing", "dpo")),
    ("dpo.reference", "model", "log", ("dpo_copy", r"DPO reference: a frozen copy of the tiny preset")),
    ("dpo.reference_model", DPO_FOLDER2, "differs", ("dpo_other", "dpo_full")),
    ("train.batch_size_training", "2", "plan", []),
    ("train.val_batch_size", "3", "log", ("misc", r"batch\(es\) of 3 row\(s\) per rank")),
    ("train.context_length", "64", "plan", []),
    ("train.batching_strategy", "padding", "log", ("padding", r"batched by length and padded")),
    ("train.gradient_accumulation_steps", "2", "log", ("misc", r"x 2 accumulation")),
    ("train.gradient_clipping", "true", "log", ("misc", r"gradient clipping at a global norm of")),
    ("train.gradient_clipping_threshold", "0.5", "log", ("misc", r"gradient clipping at a global norm of 0\.5")),
    ("train.num_epochs", "2", "log", ("misc", r"x 2 epoch\(s\)")),
    ("train.max_train_step", "2", "metrics", ("precision", "len(steps) == 2")),
    ("train.max_eval_step", "1", "log", ("misc", r"max_eval_step = 1: ")),
    ("train.num_workers_dataloader", "0", "log", ("misc", r"batches collated on the training thread")),
    ("train.lr", "0.001", "metrics", ("misc", "math.isclose(steps[1]['lr'], 0.001, rel_tol=1e-9)")),
    ("train.weight_decay", "0.5", "differs", ("weight_decay", "wd_ref")),
    ("train.optimizer", "adamw_8bit", "plan", []),
    ("train.optimizer", "adafactor", "log", ("adafactor", r"optimizer: Adafactor \(factored second moments\)")),
    ("train.adafactor_beta1", "0.9", "differs", ("af_beta1", "adafactor")),
    ("train.adafactor_decay_rate", "-0.5", "differs", ("af_decay", "adafactor")),
    ("train.adafactor_clip_threshold", "0.01", "differs", ("af_clip", "adafactor")),
    ("train.adafactor_eps", "0.001", "differs", ("af_eps", "adafactor")),
    ("train.adafactor_scale_parameter", "true", "differs", ("af_scale", "adafactor")),
    ("train.adafactor_eps_scale", "10.0", "differs", ("af_eps_scale", "af_scale")),
    ("train.adafactor_relative_step", "true", "differs", ("af_relative", "adafactor")),
    ("train.adafactor_warmup_init", "true", "differs", ("af_warmup", "af_relative")),
    ("train.gamma", "0.5", "metrics", ("gamma", "math.isclose(steps[-1]['lr'], 0.5 * steps[0]['lr'], rel_tol=1e-9)")),
    ("train.lr_scheduler", "cosine", "metrics", ("precision", "steps[1]['lr'] < steps[0]['lr']")),
    ("train.warmup_steps", "2", "metrics", ("misc", "math.isclose(steps[0]['lr'], steps[1]['lr'] / 2, rel_tol=1e-9)")),
    ("train.seed", "7", "differs", ("seed", "base")),
    ("train.run_validation", "false", "log", ("quiet", r"!validation: loss")),
    ("train.mixed_precision", "false", "log", ("misc", r"precision: parameters Float, compute Float,")),
    ("train.use_fp16", "true", "error", []),
    ("train.pure_bf16", "true", "log", ("precision", r"precision: parameters BFloat16, compute BFloat16")),
    ("train.freeze_layers", "true", "log", ("precision", r"\([1-9]\d* frozen tensors")),
    ("train.num_freeze_layers", "2", "log", ("precision", r"\(18 frozen tensors")),
    ("train.on_nonfinite", "skip_step", "metrics", ("nonfinite", "any(s.get('nonfinite_skips', 0) > 0 for s in steps)")),
    ("train.max_nonfinite_skips", "1", "log", ("nonfinite2", r"training diverged")),
    ("fsdp.sharding_strategy", "NO_SHARD", "plan", []),
    ("fsdp.hsdp_shard_size", "1", "plan", ["fsdp.sharding_strategy=HYBRID_SHARD"]),
    ("fsdp.activation_checkpointing", "false", "plan", []),
    ("fsdp.uncheckpointed_blocks", "1", "log",
     ("offload", r"activation checkpointing on for blocks 0-\d+ of \d+, the last 1 keeping their activations")),
    ("fsdp.low_cpu_fsdp", "true", "log", ("stream", r"streamed the weights into shards")),
    ("fsdp.low_cpu_fsdp_min_params", "1", "log", ("stream_min", r"streamed the weights into shards")),
    ("fsdp.load_readers", "rank0", "log", ("stream_rank0", r"read by world rank 0 for every rank")),
    ("fsdp.checkpoint_type", "full", "files", ("misc", os.path.join(CKDIR, "step-0000003", "model.h5"))),
    ("fsdp.save_optimizer", "true", "manifest", ("misc", "m['has_optimizer']")),
    ("fsdp.reduce_dtype", "bf16", "plan", []),
    ("fsdp.cpu_offload", "true", "log", ("offload", r"cpu offload: the trainable shards in host memory")),
    ("fsdp.offload_params", "true", "log", ("offload_all", r"cpu offload: all shards in host memory")),
    ("checkpoint.dir", CKDIR, "files", ("misc", os.path.join(CKDIR, "step-0000003", "manifest.json"))),
    ("checkpoint.every_steps", "1", "log", ("misc", r"checkpoint committed: .*step-0000001")),
    ("checkpoint.keep_last", "1", "files", ("misc", "!" + os.path.join(CKDIR, "step-0000002"))),
    ("checkpoint.async", "true", "log", ("misc", r"checkpoint committed: .*step-0000001 \(written in the background;")),
    ("checkpoint.resume", "none", "log", ("resume_none", r"starting fresh: \[checkpoint\] resume = \"none\"")),
    ("checkpoint.on_data_change", "new_schedule", "log", ("data_change", r"start a new schedule over this data")),
    ("checkpoint.fully_parallel", "false", "manifest", ("one_writer", "{s['file'] for s in m['slices']} == {'rank-00000.h5'}")),
    ("metrics.log_every_steps", "1", "log", ("misc", r"step 2/3 \|")),
    ("metrics.jsonl", "false", "files", ("quiet", "!metrics.jsonl")),
    ("metrics.peak_tflops", "100", "metrics", ("misc", "'mfu' in steps[-1]")),
    ("metrics.save_metrics", "true", "files", ("misc", "metrics_data.json")),
    ("metrics.use_profiler", "true", "files", ("profiler", os.path.join(PROFDIR, "rank-00000.trace.json"))),
    ("metrics.profiler_dir", PROFDIR, "files", ("profiler", os.path.join(PROFDIR, "rank-00001.trace.json"))),
    ("metrics.profiler_wait_steps", "0", "log", ("profiler", r"after 0 unprofiled")),
    ("metrics.profiler_warmup_steps", "0", "log", ("profiler", r"and 0 warm-up")),
    ("metrics.profiler_active_steps", "2", "log", ("profiler", r"steps 1\.\.2 of this run traced")),
    ("metrics.flop_counter", "true", "log", ("misc", r"flop counter: step")),
    ("metrics.flop_counter_start", "1", "log", ("misc", r"flop counter: step 2 ")),
    ("metrics.sample_ids", "true", "metrics", ("base", "'sample_ids' in steps[0]")),
    ("metrics.tensorboard", "true", "files", ("misc", "tensorboard")),
    ("data.samples_per_epoch", "20", "log", ("epoch_samples", r"mixture: an epoch takes 20 samples")),
]


def schema_keys():
    out = sh([ST, "validate", BASE_FILE]).stdout
    keys, section = [], None
    for line in out.splitlines():
        if m := re.match(r"^\[(\w+)\]$", line):
            section = m.group(1)
        elif m := re.match(r"^(\w+) = ", line):
            keys.append(f"{section}.{m.group(1)}")
    return keys


def overrides(pairs):
    return [a for p in pairs for a in ("--set", p)]


def out_dir(name):
    return os.path.join(TMP, "runs", name)


# A run starts 1 rank unless what it shows takes more: a gather to a full checkpoint, a save in the
# background, the second rank's trace, weights streamed to other ranks. Rows that compare two runs
# compare runs of the same world size.
TWO_RANKS = {"misc", "profiler", "stream", "stream_min", "stream_rank0"}
RUN_LOCKS = {name: threading.Lock() for name in RUNS}  # rows are checked two at a time: each run once


def run(name, done):
    with RUN_LOCKS[name]:
        return run_once(name, done)


def run_once(name, done):
    if name in done:
        return done[name]
    pairs, codes, start_in = RUNS[name]
    if start_in:
        run(start_in, done)
    if name == "from_peft":
        run("lora", done)
        latest = os.path.join(out_dir("lora"), "checkpoints", "latest")
        r = sh([os.path.join(BIN, "shardtune-ckpt"), "export-peft", latest, PEFT])
        assert r.returncode == 0, r.stderr
    out = out_dir(start_in or name)
    ranks = "2" if name in TWO_RANKS else "1"
    # Two runs at once: each its own Open MPI session directory (tests/CMakeLists.txt says why).
    session = {**os.environ, "OMPI_MCA_orte_tmpdir_base": os.path.join(TMP, "mpi-session", name)}
    r = sh([ST, "run", BASE_FILE, "-n", ranks, "--set", f"job.output_dir={out}"] + overrides(pairs), env=session)
    log = r.stdout + r.stderr
    rank0 = os.path.join(out, "logs", "rank-00000.log")
    if os.path.exists(rank0):
        log += open(rank0).read()
    if r.returncode not in codes:
        raise AssertionError(f"run {name} exited {r.returncode}, expected {codes}:\n{log[-3000:]}")
    done[name] = (out, log)
    return done[name]


def step_records(out):
    path = os.path.join(out, "metrics.jsonl")
    return [json.loads(l) for l in open(path) if '"step":' in l] if os.path.exists(path) else []


def losses(name, done, pattern=None):
    out, log = run(name, done)
    if pattern:
        return re.findall(pattern, log)
    return [s["loss"] for s in step_records(out)]


def command_variant(key, value, command, extras, baseline):
    """The command's output without the key (the baseline's overrides) and with it (the extras')."""
    base_args = [ST] + command + [BASE_FILE, "--set", f"job.output_dir={out_dir('dry-' + key)}"]
    return sh(base_args + overrides(baseline)), sh(base_args + overrides(extras + [f"{key}={value}"]))


def check(row, done):
    key, value, kind, detail = row[0], row[1], row[2], row[3]
    extras = row[4] if len(row) > 4 else []
    baseline = row[5] if len(row) > 5 else extras
    if kind == "plan":
        extras, baseline = detail, row[4] if len(row) > 4 else detail
    if kind == "script":
        a, b = command_variant(key, value, ["submit", "--dry-run"], extras, baseline)
        assert b.returncode == 0, b.stderr
        assert detail in b.stdout and b.stdout != a.stdout, f"the script lacks {detail!r}"
        return f"the sbatch script holds {detail!r}"
    if kind == "local":
        a, b = command_variant(key, value, ["run", "--dry-run", "-n", "2"], extras, baseline)
        assert b.returncode == 0, b.stderr
        assert detail in b.stdout and detail not in a.stdout, f"the mpirun line lacks {detail!r}: {b.stdout}"
        return f"the mpirun line holds {detail.strip()!r}"
    if kind == "plan":
        a, b = command_variant(key, value, ["plan", "--json"], extras, baseline)
        assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
        pa, pb = json.loads(a.stdout), json.loads(b.stdout)
        changed = sorted(k for k in set(pa) | set(pb) if k != "job" and pa.get(k) != pb.get(k))
        assert changed, "the plan is the same"
        return f"the memory plan changes ({', '.join(changed)})"
    if kind == "error":
        r = sh([ST, "validate", BASE_FILE, "--set", f"{key}={value}"] + overrides(detail))
        assert r.returncode == 2 and re.search(rf"error: {re.escape(key)}: ", r.stderr), r.stderr
        return "validate names it in an error: " + next(l for l in r.stderr.splitlines() if f"error: {key}:" in l).split(
            f"{key}: ", 1)[1][:90]
    name = detail[0]
    pairs = RUNS[name][0]
    assert f"{key}={value}" in pairs, f"run {name} does not set {key}={value}"
    out, log = run(name, done)
    if kind == "log":
        pattern = detail[1]
        if pattern.startswith("!"):
            assert not re.search(pattern[1:], log), f"the log of run {name} holds {pattern[1:]!r}"
            return f"the log of run {name!r} has no {pattern[1:]!r}"
        m = re.search(pattern, log)
        assert m, f"the log of run {name} lacks {pattern!r}"
        return f"the log of run {name!r} says {m.group(0)!r}"
    if kind == "metrics":
        steps = step_records(out)
        assert steps and eval(detail[1], {"math": math}, {"steps": steps}), f"metrics of run {name}: not {detail[1]}"
        return f"metrics.jsonl of run {name!r}: {detail[1]}"
    if kind == "files":
        path = detail[1].lstrip("!")
        path = path if os.path.isabs(path) else os.path.join(out, path)
        assert os.path.exists(path) != detail[1].startswith("!"), f"run {name}: {detail[1]}"
        return f"run {name!r} {'leaves no' if detail[1].startswith('!') else 'writes'} {os.path.relpath(path, TMP)}"
    if kind == "manifest":
        ckdir = next(p.split("=", 1)[1] for p in pairs + [f"checkpoint.dir={out}/checkpoints"]
                     if p.startswith("checkpoint.dir="))
        m = json.load(open(os.path.join(ckdir, "latest", "manifest.json")))
        assert eval(detail[1], {}, {"m": m}), f"manifest of run {name}: not {detail[1]}"
        return f"the manifest of run {name!r}: {detail[1]}"
    if kind == "differs":
        pattern = detail[2] if len(detail) > 2 else None
        a, b = losses(name, done, pattern), losses(detail[1], done, pattern)
        assert a and b and a != b, f"run {name} and run {detail[1]} agree: {a} / {b}"
        what = f"{pattern!r}" if pattern else "losses"
        return f"run {name!r} differs from run {detail[1]!r} in {what}: {a[:3]} vs {b[:3]}"
    raise AssertionError(f"unknown kind {kind}")


def main():
    make_inputs()
    keys = schema_keys()
    failures = []
    row_keys = {row[0] for row in ROWS}
    for key in keys:
        if key not in row_keys:
            failures.append(f"{key}: no row in the table (every key needs an observation)")
    for key in row_keys - set(keys):
        failures.append(f"{key}: a row for a key the schema does not have")
    done = {}

    def outcome(row):
        try:
            return True, check(row, done)
        except Exception as e:  # noqa: BLE001 - every row is reported
            return False, str(e)

    # Two rows at a time: a run's ranks wait on process start-up and each other as much as they compute.
    with ThreadPoolExecutor(max_workers=2) as pool:
        for row, (ok, what) in zip(ROWS, pool.map(outcome, ROWS)):
            print(f"{'ok  ' if ok else 'FAIL'} {row[0]} = {row[1]}: {what}", flush=True)
            if not ok:
                failures.append(f"{row[0]} = {row[1]}: {what}")
    print(f"{len(keys)} keys, {len(ROWS)} rows, {len(done)} runs; {len(failures)} failure(s)")
    for f in failures:
        print("FAIL", f)
    subprocess.run(["rm", "-rf", TMP])
    sys.exit(1 if failures else 0)


main()
