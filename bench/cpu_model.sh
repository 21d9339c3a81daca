#!/usr/bin/env bash
# The 0.12B-parameter Llama of the CPU benchmarks (bench/cpu_peer.sh, bench/threads.sh): 12 blocks,
# hidden 768, 12 heads of 64, 4 KV heads, vocab 32000, fp32, random weights, as a Hugging Face
# folder at WORK_DIR/model (made once; an existing one is kept).
# usage: bench/cpu_model.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1
work=$2
[ -f "$work/model/config.json" ] && exit 0
mkdir -p "$work"
cat >"$work/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 768, "intermediate_size": 2048,
 "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4, "head_dim": 64,
 "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "tie_word_embeddings": false, "initializer_range": 0.02, "hidden_act": "silu", "torch_dtype": "float32"}
JSON
"$build/bin/shardtune-make-model" --config "$work/config.json" --dtype fp32 "$work/model" >/dev/null
