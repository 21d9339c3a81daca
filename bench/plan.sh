#!/usr/bin/env bash
# The planner against measurement: each configuration below is planned (`shardtune plan --json`:
# the memory of a rank at the training peak) and run for a few steps (`shardtune run`). On the
# CPU the measured figure is the largest per-step peak RSS of any rank in metrics.jsonl; on a GPU
# (DEVICE cuda, its own configurations: bf16, context 2048, every rank on the one GPU) the largest
# per-step peak the CUDA caching allocator had allocated in tensors (its reserved peak is printed
# beside it). Step 2 on: the peaks are reset as each step begins, so loading is not in them.
# Activation checkpointing is on unless a configuration turns it off. Prints a markdown table
# with predicted / measured for each, and exits 1 when one is off by more than 15%.
# usage: bench/plan.sh [BUILD_DIR] [WORK_DIR] [NAME_REGEX (only the configurations it matches)] [DEVICE (cpu|cuda)]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=${2:-/var/tmp/shardtune-plan-bench}
only=${3:-.}
device=${4:-cpu}
[[ $device == cpu || $device == cuda ]] || { echo "bench/plan.sh: DEVICE is cpu or cuda, not '$device'" >&2; exit 2; }
st=$build/bin/shardtune
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one thread a rank: the ranks share this machine's cores
mkdir -p "$work"
[[ -f "$work/mid/config.json" ]] ||
  "$build/bin/shardtune-make-model" "$work/mid" --hidden 1024 --layers 4 --intermediate 2816 --vocab 32000 --dtype bf16 >/dev/null
[[ -f "$work/big/config.json" ]] ||
  "$build/bin/shardtune-make-model" "$work/big" --config "$root/tests/fixtures/hf_configs/llama-3.2-1b.json" --layers 6 \
    --dtype bf16 >/dev/null
[[ $device == cpu || -f "$work/1b/config.json" ]] ||
  "$build/bin/shardtune-make-model" "$work/1b" --config "$root/tests/fixtures/hf_configs/llama-3.2-1b.json" \
    --dtype bf16 >/dev/null
job() {  # job MODEL_PATH: a base job file
  cat <<TOML
[job]
name = "plan-bench"
[launch]
launcher = "mpirun"
device = "$device"
[model]
path = "$1"
[data]
format = "synthetic"
[train]
num_epochs = 1
max_train_step = 2
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
}
job "$work/mid" >"$work/mid.toml"
job "$work/big" >"$work/big.toml"
[[ $device == cpu ]] || job "$work/1b" >"$work/1b.toml"
printf '%s\n' "$(job "$root/configs/data/tiny-llama")" >"$work/tiny.toml"

# name | job file | ranks | overrides
cpu_configs=(
  "tiny, FULL_SHARD|tiny|1|train.batch_size_training=4 train.context_length=64"
  "tiny, SHARD_GRAD_OP|tiny|2|fsdp.sharding_strategy=SHARD_GRAD_OP train.batch_size_training=4 train.context_length=64"
  "0.1B, FULL_SHARD|mid|2|train.batch_size_training=2 train.context_length=256"
  "0.1B, FULL_SHARD, 3 ranks|mid|3|train.batch_size_training=4 train.context_length=256"
  "0.1B, FULL_SHARD, no activation checkpointing|mid|2|fsdp.activation_checkpointing=false train.batch_size_training=2 train.context_length=256"
  "0.1B, HYBRID_SHARD 2x2|mid|4|fsdp.sharding_strategy=HYBRID_SHARD fsdp.hsdp_shard_size=2 train.batch_size_training=1 train.context_length=256"
  "0.1B, NO_SHARD|mid|2|fsdp.sharding_strategy=NO_SHARD train.batch_size_training=2 train.context_length=128"
  "0.1B, LoRA all-linear|mid|2|peft.method=lora peft.target_modules=[\"all-linear\"] peft.lora_r=16 train.batch_size_training=2 train.context_length=256"
  "0.63B, FULL_SHARD|big|2|train.batch_size_training=1 train.context_length=64"
  "0.63B, LoRA|big|2|peft.method=lora train.batch_size_training=1 train.context_length=64"
  "0.1B, QLoRA all-linear|mid|2|peft.method=qlora peft.target_modules=[\"all-linear\"] peft.lora_r=16 train.batch_size_training=2 train.context_length=256"
  "0.1B, QLoRA, 3 ranks, blocks of 128, fp32 scales|mid|3|peft.method=qlora peft.nf4_block_size=128 peft.nf4_double_quant=false train.batch_size_training=2 train.context_length=256"
  "0.1B, QLoRA, SHARD_GRAD_OP, no activation checkpointing|mid|2|peft.method=qlora fsdp.sharding_strategy=SHARD_GRAD_OP fsdp.activation_checkpointing=false train.batch_size_training=1 train.context_length=256"
  "0.63B, QLoRA|big|2|peft.method=qlora train.batch_size_training=1 train.context_length=64"
  "0.1B, FULL_SHARD, 8-bit AdamW|mid|2|train.optimizer=adamw_8bit train.batch_size_training=2 train.context_length=256"
  "0.63B, FULL_SHARD, 8-bit AdamW|big|2|train.optimizer=adamw_8bit train.batch_size_training=1 train.context_length=64"
  "0.1B, FULL_SHARD, Adafactor|mid|2|train.optimizer=adafactor train.batch_size_training=2 train.context_length=256"
  "0.63B, FULL_SHARD, Adafactor|big|2|train.optimizer=adafactor train.batch_size_training=1 train.context_length=64"
  "0.1B, FULL_SHARD, cpu_offload|mid|2|fsdp.cpu_offload=true train.batch_size_training=2 train.context_length=256"
  "0.63B, FULL_SHARD, Adafactor with a first moment|big|2|train.optimizer=adafactor train.adafactor_beta1=0.9 train.batch_size_training=1 train.context_length=64"
)
bf16="train.mixed_precision=true train.context_length=2048"
cuda_configs=(
  "1.2B (Llama 3.2 1B), FULL_SHARD|1b|1|$bf16 train.batch_size_training=4"
  "1.2B, FULL_SHARD, no activation checkpointing|1b|1|$bf16 fsdp.activation_checkpointing=false train.batch_size_training=2"
  "1.2B, pure_bf16|1b|1|$bf16 train.pure_bf16=true train.batch_size_training=4"
  "1.2B, LoRA|1b|1|$bf16 peft.method=lora train.batch_size_training=4"
  "1.2B, QLoRA|1b|1|$bf16 peft.method=qlora train.batch_size_training=4"
  "0.63B, FULL_SHARD, 2 ranks on the GPU|big|2|$bf16 train.batch_size_training=2"
  "0.63B, SHARD_GRAD_OP, 2 ranks on the GPU|big|2|$bf16 fsdp.sharding_strategy=SHARD_GRAD_OP train.batch_size_training=2"
  "0.1B, NO_SHARD, fp32, 2 ranks on the GPU|mid|2|train.context_length=2048 fsdp.sharding_strategy=NO_SHARD train.batch_size_training=2"
)
if [[ $device == cpu ]]; then
  configs=("${cpu_configs[@]}")
  echo "| configuration | ranks | predicted GiB | measured GiB | predicted / measured |"
  echo "|---|---|---|---|---|"
else
  configs=("${cuda_configs[@]}")
  echo "| configuration | ranks | predicted GiB | allocated GiB | reserved GiB | predicted / allocated |"
  echo "|---|---|---|---|---|---|"
fi
bad=0
for c in "${configs[@]}"; do
  IFS='|' read -r name model ranks sets <<<"$c"
  [[ $name =~ $only ]] || continue
  args=()
  for s in $sets; do args+=(--set "$s"); done
  out="$work/run"
  rm -rf "$out"
  predicted=$("$st" plan "$work/$model.toml" "${args[@]}" --set "slurm.ntasks_per_node=$ranks" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes"])')
  "$st" run "$work/$model.toml" -n "$ranks" --set "job.output_dir=$out" "${args[@]}" >"$work/run.log" 2>&1 ||
    { echo "| $name | $ranks | run failed: $(tail -1 "$work/run.log") | | |"; bad=1; continue; }
  line=$(python3 - "$out/metrics.jsonl" "$predicted" "$name" "$ranks" "$device" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l][1:]
predicted, cuda = float(sys.argv[2]), sys.argv[5] == "cuda"
measured = max(r["gpu_peak_allocated_bytes" if cuda else "peak_rss_bytes"] for r in steps)
ratio = predicted / measured
extra = f" {max(r['gpu_peak_reserved_bytes'] for r in steps) / 2**30:.3f} |" if cuda else ""
print(f"| {sys.argv[3]} | {sys.argv[4]} | {predicted / 2**30:.3f} | {measured / 2**30:.3f} |{extra} {ratio:.3f} |"
      + ("" if abs(ratio - 1) <= 0.15 else " off by more than 15%"))
PY
)
  echo "$line"
  [[ $line == *"off by more"* ]] && bad=1
done
exit $bad
