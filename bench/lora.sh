#!/usr/bin/env bash
# LoRA against full fine-tuning of one model on one batch (see lora_bench.cpp): Llama 3.2 1B's
# shapes with 6 of its 16 blocks (0.63B parameters: hidden 2048, GQA 32/8 heads, intermediate 8192,
# vocabulary 128256, tied head; made once by shardtune-make-model), FULL_SHARD over RANKS ranks, then the ratios LoRA / full of peak memory, gradient and optimizer
# state, step time, gradient bytes reduced per step and trainable parameters.
# usage: bench/lora.sh [BUILD_DIR] [MODEL_DIR] [RANKS] [DEVICE] [SEQ] [R]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
model=${2:-/var/tmp/shardtune-lora-bench-model}
ranks=${3:-2}
device=${4:-cpu}
seq=${5:-256}
r=${6:-16}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -f "$model/config.json" ]] ||
  "$build/bin/shardtune-make-model" "$model" --config "$root/tests/fixtures/hf_configs/llama-3.2-1b.json" --layers 6 \
    --dtype bf16
run() {
  mpirun -np "$ranks" --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$build/bin/lora_bench" "$model" --mode "$1" --device "$device" --seq "$seq" --r "$r" | tail -1
}
lora=$(run lora)
full=$(run full)
echo "lora: $lora"
echo "full: $full"
python3 - "$lora" "$full" <<'PY'
import json, sys
lora, full = json.loads(sys.argv[1]), json.loads(sys.argv[2])
def ratio(key):
    return lora[key] / full[key] if full[key] else float("nan")
state = lambda m: m["gradient_state_bytes_per_rank"] + m["optimizer_state_bytes_per_rank"]
print(f"{full['parameters'] / 1e9:.2f}B parameters, {full['world_size']} ranks on {full['device']}, "
      f"{full['micro_batch']} x {full['seq']} tokens per rank, LoRA r = {lora['lora_r']} on all-linear")
print(f"trainable parameters           LoRA / full = {ratio('trainable_parameters'):.5f} "
      f"({lora['trainable_parameters']:,} / {full['trainable_parameters']:,})")
print(f"gradient + optimizer state     LoRA / full = {state(lora) / state(full):.5f} "
      f"({state(lora) / 2**20:.1f} / {state(full) / 2**20:.1f} MiB per rank)")
print(f"gradient bytes reduced / step  LoRA / full = {ratio('gradient_bytes_per_step_per_rank'):.5f} "
      f"({lora['gradient_bytes_per_step_per_rank'] / 2**20:.2f} / {full['gradient_bytes_per_step_per_rank'] / 2**20:.1f} MiB per rank)")
print(f"peak memory ({full['peak_memory_kind']})  LoRA / full = {ratio('peak_memory_bytes_per_rank'):.3f} "
      f"({lora['peak_memory_bytes_per_rank'] / 2**30:.2f} / {full['peak_memory_bytes_per_rank'] / 2**30:.2f} GiB per rank)")
print(f"step time (median)             LoRA / full = {ratio('step_seconds_median'):.3f} "
      f"({lora['step_seconds_median']:.2f} / {full['step_seconds_median']:.2f} s)")
PY
