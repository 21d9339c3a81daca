#!/usr/bin/env bash
# QLoRA against bf16 LoRA on one model and one batch, in the same run (see lora_bench.cpp):
# Llama shapes of 0.5B parameters (hidden 1536, 16 blocks, GQA 12/4 heads, intermediate 4096,
# vocabulary 32000, untied head; made once by shardtune-make-model), FULL_SHARD over RANKS ranks,
# bf16 mixed precision (LoRA's frozen base in bf16; QLoRA's projections in NF4, blocks of 64,
# double-quantised, dequantised to bf16). Prints the ratios QLoRA / LoRA of: the blocks' frozen
# weights held per rank, the whole frozen base held per rank (embeddings and head stay bf16 under
# both), the blocks' frozen weights all-gathered per step, every all-gather per step, peak memory
# (resident set on the CPU) and step time.
# usage: bench/qlora.sh [BUILD_DIR] [MODEL_DIR] [RANKS] [DEVICE] [SEQ]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
model=${2:-/var/tmp/shardtune-qlora-bench-model}
ranks=${3:-2}
device=${4:-cpu}
seq=${5:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ ! -f "$model/config.json" ]]; then
  python3 - "$model.config.json" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": 1536, "intermediate_size": 4096, "num_hidden_layers": 16, "num_attention_heads": 12,
           "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 32000, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "rope_scaling": None, "tie_word_embeddings": False,
           "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02, "bos_token_id": 1,
           "eos_token_id": 2, "torch_dtype": "bfloat16"}, open(sys.argv[1], "w"))
PY
  "$build/bin/shardtune-make-model" "$model" --config "$model.config.json" --dtype bf16
fi
run() {
  mpirun -np "$ranks" --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$build/bin/lora_bench" "$model" --mode "$1" --device "$device" --seq "$seq" --r 16 --bf16 --steps 2 | tail -1
}
qlora=$(run qlora)
lora=$(run lora)
echo "qlora: $qlora"
echo "lora:  $lora"
python3 - "$qlora" "$lora" <<'PY'
import json, sys
q, l = json.loads(sys.argv[1]), json.loads(sys.argv[2])
def line(what, key, unit=2**20, name="MiB"):
    print(f"{what:44s} QLoRA / LoRA = {q[key] / l[key]:.3f} ({q[key] / unit:.1f} / {l[key] / unit:.1f} {name} per rank)")
print(f"{l['parameters'] / 1e9:.2f}B parameters, {l['world_size']} ranks on {l['device']}, compute {l['compute_dtype']}, "
      f"{l['micro_batch']} x {l['seq']} tokens per rank, r = {l['lora_r']} on all-linear")
line("blocks' frozen weights held", "block_base_bytes_per_rank")
line("whole frozen base held", "base_bytes_per_rank")
line("blocks' frozen weights all-gathered / step", "block_gathered_bytes_per_step_per_rank")
line("every all-gather / step", "gathered_bytes_per_step_per_rank")
line(f"peak memory ({l['peak_memory_kind']})", "peak_memory_bytes_per_rank", 2**30, "GiB")
print(f"{'step time (median)':44s} QLoRA / LoRA = {q['step_seconds_median'] / l['step_seconds_median']:.3f} "
      f"({q['step_seconds_median']:.2f} / {l['step_seconds_median']:.2f} s)")
PY
