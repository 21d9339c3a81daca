#!/usr/bin/env bash
# shardtune-ckpt streams: on a model whose largest tensors are 512 MiB in float32, every command
# (import-hf, reshard, consolidate, verify, export-hf, diff) peaks below one such tensor, and the
# round trip loses nothing.
# usage: ckpt_memory_test.sh SHARDTUNE_CKPT SHARDTUNE_MAKE_MODEL
set -u
ckpt=$1 make_model=$2
tmp=$(mktemp -d /var/tmp/shardtune-ckpt-memory.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tensor_mib=512  # embed_tokens and lm_head: 131072 x 1024 float32
limit_mib=400   # the libraries (~200 MiB) and a few 32 MiB pieces

"$make_model" "$tmp/hf" --layers 1 --hidden 1024 --intermediate 256 --vocab 131072 --dtype bf16 >/dev/null ||
  { echo "FAIL: shardtune-make-model"; exit 1; }

# Runs a command, prints its peak memory line, checks it against the limit.
peak_of() {  # peak_of NAME CMD...
  local name=$1
  shift
  "$@" >"$tmp/out" 2>"$tmp/err" || { fail "$name failed: $(tail -3 "$tmp/err")"; return; }
  local mib
  mib=$(grep -ho "peak memory [0-9]* MiB" "$tmp/out" "$tmp/err" | tail -1 | grep -o "[0-9]*")
  [[ -n "$mib" ]] || { fail "$name printed no peak memory"; return; }
  echo "$name: peak $mib MiB (largest tensor $tensor_mib MiB)"
  ((mib < limit_mib)) || fail "$name peaked at $mib MiB, not below $limit_mib MiB"
}

peak_of import-hf "$ckpt" import-hf "$tmp/hf" "$tmp/full"
peak_of reshard "$ckpt" reshard "$tmp/full" "$tmp/sharded" --world-size 3
peak_of consolidate "$ckpt" consolidate "$tmp/sharded" "$tmp/again"
peak_of verify "$ckpt" verify "$tmp/again"
peak_of export-hf "$ckpt" export-hf "$tmp/again" "$tmp/hf2" --dtype bf16
peak_of diff "$ckpt" diff "$tmp/full" "$tmp/again"
grep -q "max abs 0.000e+00" "$tmp/out" || fail "diff shows no zero differences"
grep -v "max abs 0.000e+00" "$tmp/out" | grep -q "max abs" && fail "the round trip changed a tensor: $(grep -v 'max abs 0.000e+00' "$tmp/out" | head -3)"
# bf16 -> f32 -> bf16 is exact: the exported folder imports to the same weights.
"$ckpt" import-hf "$tmp/hf2" "$tmp/full2" 2>/dev/null || fail "re-import failed"
"$ckpt" diff "$tmp/full" "$tmp/full2" >"$tmp/out" || fail "export-hf then import-hf changed the weights"

if [ "$failures" -eq 0 ]; then echo "ckpt_memory_test: all checks passed"; else echo "ckpt_memory_test: $failures failure(s)"; fi
[ "$failures" -eq 0 ]
