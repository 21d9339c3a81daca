#!/usr/bin/env bash
# Streaming-load benchmark on synthetic Llamas of 24 and 48 blocks (hidden 2048: 3.2 and 6.2 GB in
# bf16), made here by shardtune-make-model, loaded at world size 4 (see load_bench.cpp).
# usage: bench/load.sh [BUILD_DIR] [WORK_DIR]   (WORK_DIR needs ~10 GB; default /var/tmp)
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
work=${2:-/var/tmp/shardtune-load-bench}
mkdir -p "$work"
cat >"$work/config.json" <<'JSON'
{"model_type": "llama", "hidden_act": "silu", "vocab_size": 32000, "hidden_size": 2048,
 "intermediate_size": 8192, "num_hidden_layers": 24, "num_attention_heads": 32,
 "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
 "rope_theta": 500000.0, "tie_word_embeddings": false}
JSON
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for layers in 24 48; do
  dir="$work/llama-$layers"
  [ -f "$dir/model.safetensors.index.json" ] || "$build/bin/shardtune-make-model" "$dir" --config "$work/config.json" --layers "$layers" --dtype bf16
  "$build/bin/load_bench" --naive "$dir"
  mpirun -np 4 --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$build/bin/load_bench" "$dir"
done
