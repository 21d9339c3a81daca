#!/usr/bin/env bash
# train_bench (the GPU benchmark's training binary) on the CPU with a tiny model: it loads a
# folder, trains, and prints one JSON object whose figures are consistent with each other; its
# AdamW and timing window are bench/torch_baseline.py's (the PyTorch baseline is like for like), and
# bench/gpu_report.py prints them and marks a baseline row that differs.
# usage: train_bench_smoke.sh MPIRUN TRAIN_BENCH MAKE_MODEL REPO
set -u
mpirun=$1 bench=$2 make_model=$3 repo=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
"$make_model" "$tmp/model" --layers 2 --dtype bf16 >/dev/null || { echo "FAIL: shardtune-make-model"; exit 1; }
for extra in "" --packed "--unfused rmsnorm,cross_entropy,gate_up --attention no-cudnn" \
  "--checkpointing --uncheckpointed-blocks 1"; do
  if "$mpirun" -np 2 --oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
       --mca oob_tcp_if_include lo "$bench" "$tmp/model" --device cpu --seq 48 --micro-batch 2 --steps 3 --warmup 1 \
       $extra >"$tmp/out" 2>"$tmp/err"; then
    /usr/bin/python3 - "$tmp/out" "$extra" <<'PY' || fail "train_bench $extra printed $(cat "$tmp/out")"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["engine"] == "shardtune" and r["device"] == "cpu" and r["world_size"] == 2, r
assert r["packed"] == (sys.argv[2] == "--packed"), r
assert r["activation_checkpointing"] == ("--checkpointing" in sys.argv[2]), r
assert r["uncheckpointed_blocks"] == (1 if "--uncheckpointed-blocks 1" in sys.argv[2] else 0), r
assert r["unfused"] == (["rmsnorm", "cross_entropy", "gate_up"] if "unfused" in sys.argv[2] else []), r
assert r["fused_kernels"] is False, r  # a CPU run
assert r["attention"] == ("no-cudnn" if "no-cudnn" in sys.argv[2] else "measured"), r
assert r["attention_choices"] == {}, r  # the CPU has no kernel to choose
assert r["step_seconds_min"] <= r["step_seconds_median"] <= r["step_seconds_max"], r
tokens = 2 * 48 * 2  # micro-batch x seq x ranks
assert abs(r["tokens_per_s"] * r["step_seconds_median"] - tokens) < 1e-6 * tokens, r
assert abs(r["tflops_per_s_per_device"] * 1e12 * 2 - r["tokens_per_s"] * r["flops_per_token"]) < 1e-3 * r["tokens_per_s"] * r["flops_per_token"], r
PY
    [ -z "$extra" ] && cp "$tmp/out" "$tmp/plain.json"
  else
    fail "train_bench $extra failed: $(tail -5 "$tmp/err")"
  fi
done
# The allocator's history is the CUDA caching allocator's: asked for on the CPU, refused by name.
if "$mpirun" -np 1 --oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
     --mca oob_tcp_if_include lo "$bench" "$tmp/model" --device cpu --seq 48 --micro-batch 2 --steps 1 --warmup 0 \
     --memory-snapshot "$tmp/snapshot.pickle" >"$tmp/out" 2>"$tmp/err"; then
  fail "train_bench --memory-snapshot ran on the CPU"
elif ! grep -q -- "--memory-snapshot .*needs a GPU" "$tmp/err" || [ -e "$tmp/snapshot.pickle" ]; then
  fail "train_bench --memory-snapshot on the CPU: $(tail -3 "$tmp/err")"
fi
# Like for like: the PyTorch baseline's AdamW and timing window are train_bench's, and the report
# prints them; a baseline row with another weight decay is marked as not like for like.
if [ -f "$tmp/plain.json" ]; then
  /usr/bin/python3 - "$tmp/plain.json" "$repo/bench" "$tmp" <<'PY' || fail "like for like with bench/torch_baseline.py"
import json, subprocess, sys
ours = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sys.path.insert(0, sys.argv[2])
import torch_baseline  # imports torch only inside its functions
hyper = {k: list(v) if isinstance(v, tuple) else v for k, v in torch_baseline.ADAMW.items() if k != "fused"}
assert torch_baseline.ADAMW["fused"] and ours["adamw"] == "fused", (torch_baseline.ADAMW, ours["adamw"])
assert ours["adamw_hyper"] == hyper, (ours["adamw_hyper"], hyper)
assert ours["timing"] == torch_baseline.TIMING, (ours["timing"], torch_baseline.TIMING)
def report(torch_row):
    open(f"{sys.argv[3]}/runs.jsonl", "w").write(json.dumps(ours) + "\n" + json.dumps(torch_row) + "\n")
    return subprocess.run([sys.executable, f"{sys.argv[2]}/gpu_report.py", f"{sys.argv[3]}/runs.jsonl", sys.argv[3]],
                          capture_output=True, text=True, check=True).stdout
row = {"engine": "pytorch-fsdp2", "micro_batch": ours["micro_batch"], "activation_checkpointing": False,
       "sdpa": "flash", "attention_kernels": {"flash_fwd_kernel": 1.0}, "adamw": "fused", "adamw_hyper": hyper,
       "timing": torch_baseline.TIMING, "tokens_per_s": ours["tokens_per_s"] / 2, "peak_allocated_gib": 1.0}
text = report(row)
assert "Both engines: AdamW " + json.dumps(hyper, sort_keys=True) + "; timing: " + torch_baseline.TIMING in text, text
assert "| 2.00 |" in text and "not like for like" not in text, text
text = report(dict(row, adamw_hyper=dict(hyper, weight_decay=0.01)))
assert "| 2.00 (not like for like: adamw_hyper differ) |" in text, text
# An ablation row: named by what it leaves unfused, priced against the fully fused row.
text = report(dict(ours, unfused=["rmsnorm"], tokens_per_s=ours["tokens_per_s"] / 1.25))
assert "| shardtune, unfused: rmsnorm |" in text and "| 1.25 |" in text, text
# Each engine's allocator peak, as bench/memory_peak.py summarises it, and a missing one said so.
peak = {"peak_bytes": 3 * 2**30, "peak_event": 7, "live_blocks": 2,
        "groups": [{"origin": "shardtune::fsdp::FlatParam::accumulate_grad", "blocks": 2, "bytes": 3 * 2**30}]}
open(f"{sys.argv[3]}/memory-shardtune.json", "w").write(json.dumps(peak))
text = report(row)
assert "- shardtune: 3.00 GiB at the peak, 2 blocks" in text, text
assert "  - 3.000 GiB, 2 blocks: `shardtune::fsdp::FlatParam::accumulate_grad`" in text, text
assert "- pytorch: no snapshot" in text, text
PY
fi
[ "$failures" -eq 0 ] && echo "train_bench_smoke: all checks passed"
[ "$failures" -eq 0 ]
