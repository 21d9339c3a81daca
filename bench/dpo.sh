#!/usr/bin/env bash
# What DPO costs against SFT on the same pairs, per reference mode, on the CPU: bench/plan.sh's
# 0.1B Llama (hidden 1024, 4 blocks), fp32, FULL_SHARD over 2 ranks, activation checkpointing,
# micro-batches of 2 pairs whose every sequence is context_length (128) tokens long (long text
# pairs, cut to it by the pair rule). SFT trains the chosen sequences alone (2 rows a micro-batch,
# the same prompts and answers cut to the same length by SFT's rule, the answer's end),
# DPO both answers (4 rows) and, by mode, a reference pass: the base with its adapters off (LoRA),
# a frozen sharded copy (reference = "model"), or none (precomputed, computed before the first
# step and not timed). Prints per configuration the median step time and the largest peak RSS of
# any rank (steps 2 on) over SFT's of the same model (LoRA or full), and the planner's prediction
# over the measured peak; exits 1 when a run fails or a prediction is off by more than 15%.
# usage: bench/dpo.sh [BUILD_DIR] [WORK_DIR] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=${2:-/var/tmp/shardtune-dpo-bench}
steps=${3:-3}
st=$build/bin/shardtune
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$work"
[[ -f "$work/mid/config.json" ]] ||
  "$build/bin/shardtune-make-model" "$work/mid" --hidden 1024 --layers 4 --intermediate 2816 --vocab 32000 --dtype bf16 >/dev/null
python3 - "$work" <<'PY'
import json, random, sys
rng = random.Random(7)
words = "sky grass cat bird sun rain ice water dog honey cold down east west seven four".split()
text = lambda n: " ".join(rng.choice(words) for _ in range(n))
with open(sys.argv[1] + "/pairs.jsonl", "w") as pairs, open(sys.argv[1] + "/chosen.jsonl", "w") as chosen:
    for _ in range(200):
        p, c, r = text(50), text(200), text(200)
        pairs.write(json.dumps({"prompt": p, "chosen": c, "rejected": r}) + "\n")
        chosen.write(json.dumps({"prompt": p, "response": c}) + "\n")
PY
cat >"$work/job.toml" <<TOML
[job]
name = "dpo-bench"
[launch]
launcher = "mpirun"
device = "cpu"
[model]
path = "$work/mid"
[data]
tokenizer = "$root/configs/data/tiny-chat-tokenizer/tokenizer.json"
[train]
batching_strategy = "padding"
context_length = 128
batch_size_training = 2
num_epochs = 1
max_train_step = $steps
mixed_precision = false
run_validation = false
[fsdp]
low_cpu_fsdp = true
activation_checkpointing = true
[checkpoint]
every_steps = 0
resume = "none"
[metrics]
log_every_steps = 1
TOML
sft=(--set data.format=jsonl --set "data.train_file=$work/chosen.jsonl")
dpo=(--set train.objective=dpo --set data.format=preference --set "data.train_file=$work/pairs.jsonl")
lora=(--set peft.method=lora --set 'peft.target_modules=["all-linear"]' --set peft.lora_r=16)
# name | overrides (word-split) | the SFT run it is set against
configs=(
  "LoRA, SFT||"
  "LoRA, DPO, reference = base|dpo lora dpo.reference=base|LoRA, SFT"
  "LoRA, DPO, reference = precomputed|dpo lora dpo.reference=precomputed|LoRA, SFT"
  "LoRA, DPO, reference = model|dpo lora dpo.reference=model|LoRA, SFT"
  "full, SFT|full|"
  "full, DPO, reference = model|dpo full dpo.reference=model|full, SFT"
  "full, DPO, reference = precomputed|dpo full dpo.reference=precomputed|full, SFT"
)
declare -A seconds rss
bad=0
echo "| configuration | step time / SFT's | peak RSS / SFT's | planned / measured peak |"
echo "|---|---|---|---|"
for c in "${configs[@]}"; do
  IFS='|' read -r name words against <<<"$c"
  args=()
  [[ " $words " == *" dpo "* ]] && args+=("${dpo[@]}") || args+=("${sft[@]}")
  [[ " $words " == *" full "* ]] || args+=("${lora[@]}")
  for w in $words; do [[ $w == *=* ]] && args+=(--set "$w"); done
  out="$work/run"
  rm -rf "$out"
  predicted=$("$st" plan "$work/job.toml" "${args[@]}" --set slurm.ntasks_per_node=2 --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes"])')
  "$st" run "$work/job.toml" -n 2 --set "job.output_dir=$out" "${args[@]}" >"$work/run.log" 2>&1 ||
    { echo "| $name | run failed: $(grep -m1 critical "$work/run.log" | cut -c1-200) | | |"; exit 1; }
  read -r s m < <(python3 - "$out/metrics.jsonl" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l][1:]
print(statistics.median(r["step_seconds"] for r in steps), max(r["peak_rss_bytes"] for r in steps))
PY
)
  seconds[$name]=$s
  rss[$name]=$m
  base=${against:-$name}
  line=$(python3 -c "
s, m, bs, bm, p = $s, $m, ${seconds[$base]}, ${rss[$base]}, $predicted
r = p / m
print(f'| $name | {s / bs:.3f} | {m / bm:.3f} | {r:.3f}' + (' off by more than 15% |' if abs(r - 1) > 0.15 else ' |'))")
  echo "$line"
  [[ $line == *"off by more"* ]] && bad=1
done
exit $bad
