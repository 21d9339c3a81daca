#!/usr/bin/env bash
# What the base model's identity costs a LoRA job's load: cold streamed loads of a synthetic Llama
# (hidden 2048, LAYERS blocks, bf16, made here by shardtune-make-model) at world size RANKS, without
# and with world rank 0 digesting every byte it reads (SHA-256 per tensor, checkpoint/hf/weights_digest.h),
# alternating, REPS of each; prints each pair and the median ratio (bench/load_bench.cpp --digest).
# usage: bench/digest.sh [BUILD_DIR] [WORK_DIR] [LAYERS] [RANKS] [REPS]
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
work=${2:-/var/tmp/shardtune-digest-bench}
layers=${3:-8} ranks=${4:-2} reps=${5:-5}
mkdir -p "$work"
cat >"$work/config.json" <<'JSON'
{"model_type": "llama", "hidden_act": "silu", "vocab_size": 32000, "hidden_size": 2048,
 "intermediate_size": 8192, "num_hidden_layers": 8, "num_attention_heads": 32,
 "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
 "rope_theta": 500000.0, "tie_word_embeddings": false}
JSON
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir="$work/llama-$layers"
[ -f "$dir/config.json" ] || "$build/bin/shardtune-make-model" "$dir" --config "$work/config.json" --layers "$layers" --dtype bf16 >/dev/null
mpirun -np "$ranks" --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  "$build/bin/load_bench" --reps "$reps" --digest "$dir"
