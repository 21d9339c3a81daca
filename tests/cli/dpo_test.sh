#!/usr/bin/env bash
# [train] objective = "dpo" end to end through `shardtune run` (2 ranks), from the tiny preset's
# random weights, on pairs of the chat example's questions (one-word answers chosen over its
# sentences):
#  - LoRA against its base with its adapters off: the reward margin of the last ten of 60 steps is
#    above that of the first ten, and validation's accuracy on the held-out pairs ends above 0.9;
#    every step and validation record carries TRL's names (rewards/chosen, ..., logps/rejected),
#    and `shardtune plot` draws the margins and the accuracies;
#  - full fine-tuning against a frozen sharded copy of the starting weights trains the same way, and
#    QLoRA in bf16 with activation checkpointing and gradient accumulation trains;
#  - reference = "precomputed": computed once, stored, the same losses as the base with adapters off
#    (within 1e-5), read again by a resume at another world size, refused when damaged; a resume
#    against another reference than its checkpoint's is refused, naming both;
#  - `shardtune validate` refuses, naming the key (exit 2): a [dpo] key without objective = "dpo",
#    preference data without it, DPO on other data, reference = "base" without adapters,
#    label_smoothing with another loss than sigmoid, packed pairs, and TRL's names;
#  - a bad pair stops the job naming its file:line and field; on_bad_record = "skip" counts it.
# usage: dpo_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
py=/usr/bin/python3

# Pairs a model learns to tell apart from its random start: the tiny chat example's questions, a
# one-word answer chosen over a sentence (configs/data/tiny-preference.jsonl's pairs differ in one
# word, which only a model that knows the facts tells apart: tests/cli/generate_test.sh).
$py - "$tmp/pairs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(53)
facts = {}
for line in open("configs/data/tiny-preference.jsonl"):
    r = json.loads(line)
    facts[r["prompt"][-1]["content"]] = r["chosen"]
systems = ["You are a helpful assistant.", "Answer in one short sentence."]
with open(sys.argv[1], "w") as f:
    for _ in range(600):
        question = rng.choice(sorted(facts))
        sentence = facts[question]
        prompt = ([{"role": "system", "content": rng.choice(systems)}] if rng.random() < 0.4 else []) + \
                 [{"role": "user", "content": question}]
        f.write(json.dumps({"prompt": prompt, "chosen": sentence.rstrip(".").split()[-1].capitalize() + ".",
                            "rejected": sentence}) + "\n")
PY

cat >"$tmp/job.toml" <<TOML
[job]
name = "dpo"
output_dir = "$tmp/out"
[slurm]
ntasks_per_node = 2
[launch]
launcher = "mpirun"
device = "cpu"
[model]
preset = "tiny"
init = "random"
[peft]
method = "lora"
[data]
format = "preference"
train_file = "$tmp/pairs.jsonl"
tokenizer = "configs/data/tiny-chat-tokenizer/tokenizer.json"
val_fraction = 0.1
[train]
objective = "dpo"
batching_strategy = "padding"
context_length = 128
batch_size_training = 4
num_epochs = 1
max_train_step = 60
lr = 0.01
mixed_precision = false
[dpo]
beta = 0.1
[metrics]
log_every_steps = 10
TOML

check_run() {  # check_run NAME: the margins grow, validation's accuracy ends above 0.9, TRL's names
  $py - "$tmp/$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "step" in r]
evals = [r for r in rows if "val_loss" in r]
names = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"]
assert all(all(n in r for n in names) for r in steps), "a step record lacks TRL's names"
assert evals and all("val_" + n in evals[-1] for n in names), evals
first = sum(r["rewards/margins"] for r in steps[:10]) / 10
last = sum(r["rewards/margins"] for r in steps[-10:]) / 10
print(f"margin {first:.4f} -> {last:.4f}; held-out accuracy {evals[-1]['val_rewards/accuracies']:.3f}, "
      f"margin {evals[-1]['val_rewards/margins']:.4f}")
assert len(steps) == 60 and last > first, (first, last)
assert evals[-1]["val_rewards/accuracies"] > 0.9, evals[-1]
PY
}

"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/lora" >"$tmp/lora.log" 2>&1 || fail "the LoRA DPO run failed: $(tail -5 "$tmp/lora.log")"
grep -q "the reference is the base model with the adapters switched off" "$tmp/lora/logs/rank-00000.log" ||
  fail "the LoRA run does not say its reference"
check_run lora || fail "LoRA DPO did not learn the preferences"

# `shardtune plot` draws the margins and the accuracies beside the usual charts.
"$st" plot "$tmp/lora" --width 640 --height 400 >"$tmp/plot.out" 2>&1 || fail "plot failed: $(cat "$tmp/plot.out")"
for chart in loss margins accuracies; do
  grep -qx "$tmp/lora/plots/$chart.png" "$tmp/plot.out" || fail "plot did not name $chart.png"
  $py tests/cli/png_check.py "$tmp/lora/plots/$chart.png" 640 400 9400d3 || fail "$chart.png is not the chart it should be"
done

"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/full" --set peft.method=none --set train.lr=0.002 \
  >"$tmp/full.log" 2>&1 || fail "the full DPO run failed: $(tail -5 "$tmp/full.log")"
grep -q "DPO reference: a frozen copy of the tiny preset" "$tmp/full/logs/rank-00000.log" ||
  fail "the full fine-tune does not log its frozen reference"
check_run full || fail "full-fine-tuning DPO did not learn the preferences"

# QLoRA in bf16 mixed precision, with activation checkpointing and two micro-batches a step: its
# reference is its NF4 base with the adapters off; the steps train (finite losses, a growing margin).
"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/qlora" --set peft.method=qlora --set train.mixed_precision=true \
  --set fsdp.activation_checkpointing=true --set train.gradient_accumulation_steps=2 --set train.max_train_step=30 \
  --set train.run_validation=false >"$tmp/qlora.log" 2>&1 || fail "the QLoRA DPO run failed: $(tail -5 "$tmp/qlora.log")"
$py - "$tmp/qlora/metrics.jsonl" <<'PY' || fail "QLoRA DPO in bf16 did not train"
import json, math, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
first = sum(r["rewards/margins"] for r in steps[:5]) / 5
last = sum(r["rewards/margins"] for r in steps[-5:]) / 5
print(f"QLoRA, bf16: margin {first:.4f} -> {last:.4f} over {len(steps)} steps")
assert len(steps) == 30 and all(math.isfinite(r["loss"]) for r in steps) and last > first
PY

# Precomputed: computed once and stored; the same losses as the reference run beside them; a
# resume at another world size reads them; a damaged file is refused naming it.
"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/pre" --set dpo.reference=precomputed \
  >"$tmp/pre.log" 2>&1 || fail "the precomputed DPO run failed: $(tail -5 "$tmp/pre.log")"
grep -q "computed the reference's log-probabilities of the [0-9]* training pairs" "$tmp/pre/logs/rank-00000.log" ||
  fail "the precomputed run did not compute the reference's log-probabilities"
$py - "$tmp/lora/metrics.jsonl" "$tmp/pre/metrics.jsonl" <<'PY' || fail "precomputed and base references differ"
import json, sys
runs = [[json.loads(l) for l in open(p) if '"step"' in l] for p in sys.argv[1:]]
worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(*runs))
print(f"precomputed against the base with adapters off: largest relative loss difference {worst:.2e} over {len(runs[0])} steps")
assert len(runs[0]) == len(runs[1]) == 60 and worst < 1e-5
PY
"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/pre" --set dpo.reference=precomputed -n 1 \
  --set train.max_train_step=70 >"$tmp/pre2.log" 2>&1 || fail "the precomputed resume failed: $(tail -5 "$tmp/pre2.log")"
grep -q "the reference's log-probabilities of the training pairs from" "$tmp/pre/logs/rank-00000.log" ||
  fail "the resume did not read the stored log-probabilities"
grep -q "computed the reference's log-probabilities" "$tmp/pre2.log" && fail "the resume computed them again"
logps=$(ls "$tmp"/pre/reference-logps/training-*.logps)
$py - "$logps" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[-3] ^= 0x40
open(path, "wb").write(bytes(data))
PY
"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/pre" --set dpo.reference=precomputed \
  --set train.max_train_step=80 >"$tmp/pre3.log" 2>&1 && fail "a damaged precomputed file was used"
grep -q "$(basename "$logps"): its values do not match their checksum" "$tmp/pre3.log" ||
  fail "the damaged file is not named: $(grep -i checksum "$tmp/pre3.log" | head -2)"

# The reference a checkpoint trained against is recorded: a resume against another is refused.
bin=$(dirname "$st")
vocab=$($py -c 'import json, sys; t = json.load(open(sys.argv[1]))
print(1 + max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]]))' \
  configs/data/tiny-chat-tokenizer/tokenizer.json)  # the tiny preset takes its tokenizer's vocabulary
"$bin/shardtune-make-model" "$tmp/ref-a" --seed 5 --dtype fp32 --vocab "$vocab" >/dev/null &&
  "$bin/shardtune-make-model" "$tmp/ref-b" --seed 6 --dtype fp32 --vocab "$vocab" >/dev/null || fail "make-model failed"
"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/refs" --set peft.method=none --set "dpo.reference_model=$tmp/ref-a" \
  --set train.max_train_step=5 >"$tmp/refs.log" 2>&1 || fail "the DPO run against ref-a failed: $(tail -5 "$tmp/refs.log")"
"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/refs" --set peft.method=none --set "dpo.reference_model=$tmp/ref-b" \
  --set train.max_train_step=10 >"$tmp/refs2.log" 2>&1 && fail "a resume against another reference ran"
grep -q "dpo reference: .*ref-a.* in the checkpoint, .*ref-b.* now" "$tmp/refs2.log" ||
  fail "the change of reference is not named: $(grep -i "dpo reference" "$tmp/refs2.log" | head -2)"

refused() {  # refused KEY_TEXT [--set ...]: validate exits 2 naming KEY_TEXT
  local want=$1
  shift
  local out
  out=$("$st" validate "$tmp/job.toml" "$@" 2>&1)
  local code=$?
  [[ $code == 2 && $out == *"$want"* ]] || fail "validate $* exited $code without naming $want: $out"
}
refused "dpo.beta" --set train.objective=sft --set data.format=chat --set dpo.beta=0.5
refused "only [train] objective = \"dpo\" trains on" --set train.objective=sft
refused "format = \"preference\"" --set data.format=chat
refused "reference = \"base\" is the model with its adapters switched off" --set peft.method=none --set dpo.reference=base
refused "label_smoothing = 0.2 is the conservative DPO's" --set dpo.loss_type=ipo --set dpo.label_smoothing=0.2
refused "never packed" --set train.batching_strategy=packing
refused "reference = \"precomputed\"" --set dpo.precompute_ref_log_probs=true
refused "reference_model = " --set dpo.reference=base --set dpo.reference_model=/tmp
refused "[train] context_length" --set dpo.max_prompt_length=64
refused "[dpo] beta" --set train.beta=0.5

# A bad pair: named, or skipped and counted.
head -20 "$tmp/pairs.jsonl" >"$tmp/bad.jsonl"
echo '{"prompt": [{"role": "user", "content": "Sky?"}], "chosen": "Blue.", "rejected": "Blue."}' >>"$tmp/bad.jsonl"
head -60 "$tmp/pairs.jsonl" | tail -40 >>"$tmp/bad.jsonl"
"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/bad" --set "data.train_file=$tmp/bad.jsonl" \
  --set train.max_train_step=2 >"$tmp/bad.log" 2>&1 && fail "a job with a bad pair ran"
grep -q "bad.jsonl:21: chosen and rejected are the same answer" "$tmp/bad.log" ||
  fail "the bad pair is not named by file:line: $(grep -i bad "$tmp/bad.log" | head -3)"
"$st" run "$tmp/job.toml" --set "job.output_dir=$tmp/skip" --set "data.train_file=$tmp/bad.jsonl" \
  --set data.on_bad_record=skip --set train.max_train_step=2 >"$tmp/skip.log" 2>&1 ||
  fail "on_bad_record = skip did not skip the bad pair: $(tail -3 "$tmp/skip.log")"
grep -q "skipped 1 bad record(s) of 61" "$tmp/skip/logs/rank-00000.log" || fail "the skipped pair is not counted"

[[ $failures == 0 ]] && echo "dpo end to end: all checks passed"
exit $((failures > 0))
