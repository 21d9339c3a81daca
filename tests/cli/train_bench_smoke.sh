#!/usr/bin/env bash
# train_bench (the GPU benchmark's training binary) on the CPU with a tiny model: it loads a
# folder, trains, and prints one JSON object whose figures are consistent with each other.
# usage: train_bench_smoke.sh MPIRUN TRAIN_BENCH MAKE_MODEL
set -u
mpirun=$1 bench=$2 make_model=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
"$make_model" "$tmp/model" --layers 2 --dtype bf16 >/dev/null || { echo "FAIL: shardtune-make-model"; exit 1; }
for packed in "" --packed; do
  if "$mpirun" -np 2 --oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
       --mca oob_tcp_if_include lo "$bench" "$tmp/model" --device cpu --seq 48 --micro-batch 2 --steps 3 --warmup 1 \
       $packed >"$tmp/out" 2>"$tmp/err"; then
    /usr/bin/python3 - "$tmp/out" "$packed" <<'PY' || fail "train_bench $packed printed $(cat "$tmp/out")"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["engine"] == "shardtune" and r["device"] == "cpu" and r["world_size"] == 2, r
assert r["packed"] == (sys.argv[2] == "--packed"), r
assert r["step_seconds_min"] <= r["step_seconds_median"] <= r["step_seconds_max"], r
tokens = 2 * 48 * 2  # micro-batch x seq x ranks
assert abs(r["tokens_per_s"] * r["step_seconds_median"] - tokens) < 1e-6 * tokens, r
assert abs(r["tflops_per_s_per_device"] * 1e12 * 2 - r["tokens_per_s"] * r["flops_per_token"]) < 1e-3 * r["tokens_per_s"] * r["flops_per_token"], r
PY
  else
    fail "train_bench $packed failed: $(tail -5 "$tmp/err")"
  fi
done
[ "$failures" -eq 0 ] && echo "train_bench_smoke: all checks passed"
[ "$failures" -eq 0 ]
