#!/usr/bin/env bash
# What measuring costs, on one model and batch in one run: a real job (shardtune run, RANKS ranks,
# FULL_SHARD) on a random Llama of hidden 256, 2 blocks, vocabulary 4096, sequence 128, 2 rows per
# rank — small, so that per-step costs weigh more than on real models — run alternately
#   off: metrics.jsonl off, profiler off;
#   on:  metrics.jsonl on (gradient norm, peaks, MFU, one line per step);
#   profiled: on, plus the profiler tracing steps 11..13 (for the count of named ranges per step);
# ROUNDS times each, in alternating order. Step times are the rank-0 log's per-step figures, steps
# 4..20 of each run; each round compares the medians of its two runs, and the median of those
# ratios is the figure (this machine's speed drifts between runs more than metrics cost). "Off" against no instrumentation at all is
# the inactive named ranges a step carries (counted in the profiled run's trace) times their cost
# (record_scope_bench), over the off step time.
# usage: bench/metrics.sh [BUILD_DIR] [RANKS] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
ranks=${2:-2}
rounds=${3:-6}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bin/shardtune-make-model" "$tmp/model" --hidden 256 --layers 2 --intermediate 768 --vocab 4096 \
  --dtype fp32 >/dev/null
cat >"$tmp/job.toml" <<TOML
[job]
name = "metrics-bench"
[slurm]
ntasks_per_node = $ranks
[launch]
launcher = "mpirun"
device = "cpu"
[model]
path = "$tmp/model"
[data]
format = "synthetic"
[train]
batch_size_training = 2
context_length = 128
num_epochs = 1
max_train_step = 20
mixed_precision = false
run_validation = false
[fsdp]
activation_checkpointing = false
[checkpoint]
every_steps = 0
resume = "none"
[metrics]
log_every_steps = 1
TOML
run() {  # run NAME [--set ...]: prints the per-step seconds of steps 4..20
  local name=$1
  shift
  rm -rf "$tmp/$name"
  "$build/bin/shardtune" run "$tmp/job.toml" --set "job.output_dir=$tmp/$name" "$@" >"$tmp/$name.log" 2>&1
  grep -o '| [0-9.]* s/step' "$tmp/$name/logs/rank-00000.log" | awk '{print $2}' | tail -n +4
}
for ((i = 1; i <= rounds; i++)); do  # off, on; then on, off; ...: drift and order effects cancel
  if ((i % 2)); then
    run off --set metrics.jsonl=false >"$tmp/off.$i.txt"
    run on >"$tmp/on.$i.txt"
  else
    run on >"$tmp/on.$i.txt"
    run off --set metrics.jsonl=false >"$tmp/off.$i.txt"
  fi
done
run profiled --set metrics.use_profiler=true --set metrics.profiler_wait_steps=10 --set metrics.profiler_warmup_steps=0 \
  --set metrics.profiler_active_steps=3 >"$tmp/profiled.txt"
scope=$("$build/bin/record_scope_bench")
python3 - "$tmp" "$scope" "$ranks" "$rounds" <<'PY'
import json, statistics, sys
tmp, scope, ranks, rounds = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def steps(name):
    return [float(x) for x in open(f"{tmp}/{name}.txt").read().split()]
rounds_off = [steps(f"off.{i}") for i in range(1, rounds + 1)]
rounds_on = [steps(f"on.{i}") for i in range(1, rounds + 1)]
times = {"off": sum(rounds_off, []), "on": sum(rounds_on, []), "profiled": steps("profiled")[7:10]}  # steps 11..13
med = {k: statistics.median(v) for k, v in times.items()}
pair_ratios = [statistics.median(a) / statistics.median(b) for a, b in zip(rounds_on, rounds_off)]
trace = json.load(open(f"{tmp}/profiled/profiler/rank-00000.trace.json"))
ranges = sum(1 for e in trace["traceEvents"] if e.get("cat") == "user_annotation") / 3
off_cost = ranges * scope["inactive_range_ns"] * 1e-9 / med["off"]
print(f"{ranks} ranks on the CPU, {rounds} rounds of 17 steps per setting; median step: off {med['off']:.4f} s, "
      f"on {med['on']:.4f} s, profiled {med['profiled']:.4f} s")
print(f"metrics on / off               = {statistics.median(pair_ratios):.4f}   (target <= 1.05; median of the rounds' "
      f"ratios {', '.join(f'{r:.3f}' for r in pair_ratios)}; of all steps {med['on'] / med['off']:.4f})")
print(f"profiler tracing / off         = {med['profiled'] / med['off']:.4f}   (the traced steps 11..13)")
print(f"off: {ranges:.0f} inactive named ranges per step x {scope['inactive_range_ns']:.1f} ns = "
      f"{off_cost:.6f} of the step   (target <= 0.02)")
PY
