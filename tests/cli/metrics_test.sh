#!/usr/bin/env bash
# metrics.jsonl of a real 2-rank run (the tiny Llama of configs/data/tiny-llama on synthetic rows
# of 32 tokens, 2 rows x 2 micro-batches per rank), each field checked against something
# independent:
#  - tokens: rows x columns of the global batch; flops: tokens x (6·N + 12·L·d·T) with N counted
#    here from config.json (the head once, tied or not); mfu: flops / step_seconds / (peak_tflops x ranks);
#  - compute + communication wait + data wait = step time;
#  - loss and gradient norm equal those of the same steps at 1 rank (the same global batches);
#  - the evaluation record matches the log's validation line, perplexity = exp(loss);
#  - metrics_data.json (save_metrics) holds the same losses in llama-recipes' layout;
#  - a resume from step 6 trims the file back to step 6: steps 1..12 appear once, and steps 7..12
#    repeat the first run's losses bitwise;
#  - the flop counter's count of step 3's matrix products (LibTorch's own, from the shapes it
#    multiplied) agrees with the 6·N + 12·L·d·T estimate within 2%;
#  - the profiler's Chrome trace of each rank holds steps 6 and 7 only (4 waited, 1 warm-up
#    discarded), with LibTorch's operators and every named range, the checkpoint save included;
#  - TensorBoard's event files (tensorboard_check.py: decoded from TensorFlow's .proto by protoc's
#    Python, CRCs checked) hold every scalar of metrics.jsonl, step for step, after the first run
#    and after the resume, whose second file supersedes steps 6..12 of the first; an event folder
#    that cannot be made is a warning and the run trains to its end;
#  - save_metrics without jsonl, a flop counter step inside the profiled steps, tensorboard without
#    jsonl and llama-recipes' [train] save_metrics are refused.
# usage: metrics_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
py=/usr/bin/python3

cat >"$tmp/job.toml" <<TOML
[job]
name = "metrics"
[slurm]
ntasks_per_node = 2
[launch]
launcher = "mpirun"
collective_timeout_s = 120.0
device = "cpu"
[model]
path = "configs/data/tiny-llama"
[data]
format = "synthetic"
[train]
batch_size_training = 2
gradient_accumulation_steps = 2
context_length = 32
num_epochs = 1
max_train_step = 12
lr = 3e-3
mixed_precision = false
run_validation = true
max_eval_step = 2
[fsdp]
activation_checkpointing = false
save_optimizer = true
[checkpoint]
every_steps = 6
[metrics]
log_every_steps = 1
peak_tflops = 0.5
save_metrics = true
flop_counter = true
flop_counter_start = 2
use_profiler = true
profiler_wait_steps = 4
profiler_warmup_steps = 1
profiler_active_steps = 2
tensorboard = true
TOML

run() {  # run NAME RANKS [--set ...]
  local name=$1 ranks=$2
  shift 2
  "$st" run "$tmp/job.toml" -n "$ranks" --set "job.output_dir=$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { fail "$name: the run failed"; tail -5 "$tmp/$name.log"; }
}

run two 2
run one 1 --set train.max_train_step=3 --set train.batch_size_training=4
$py - "$tmp/two" "$tmp/one" configs/data/tiny-llama/config.json <<'PY' || fail "metrics.jsonl fields are wrong"
import json, math, re, sys
two, one, config = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
records = [json.loads(l) for l in open(f"{two}/metrics.jsonl")]
steps = [r for r in records if "step" in r]
evals = [r for r in records if "val_loss" in r]
assert [r["step"] for r in steps] == list(range(1, 13)), [r["step"] for r in steps]
# N: every parameter a token multiplies by, counted from the shapes: all but the token embedding
# (a lookup), the head once (tied or not).
d, L, V, F = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"], config["intermediate_size"]
H, KV, Q = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
block = d * H * Q + 2 * d * KV * Q + H * Q * d + 3 * d * F + 2 * d
n = L * block + d + V * d
T = 32
tokens = 2 * 2 * 2 * T  # rows x micro-batches x ranks x columns
for r in steps:
    assert r["tokens"] == tokens, r
    assert math.isclose(r["flops"], tokens * (6 * n + 12 * L * H * Q * T), rel_tol=1e-12), (r, n)
    assert math.isclose(r["mfu"], r["flops"] / r["step_seconds"] / (0.5e12 * 2), rel_tol=2e-3), r
    assert math.isclose(r["tokens_per_second"], tokens / r["step_seconds"], rel_tol=2e-3), r
    split = r["compute_seconds"] + r["comm_wait_seconds"] + r["data_wait_seconds"]
    assert abs(split - r["step_seconds"]) < 5e-6, r
    assert r["comm_wait_seconds"] > 0 and r["data_wait_seconds"] >= 0 and r["compute_seconds"] > 0, r
    assert 32 << 20 < r["peak_rss_bytes"] < 16 << 30, r
    assert r["grad_norm"] > 0 and math.isfinite(r["grad_norm"]), r
    for absent in ("loss_scale", "skipped", "gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes"):
        assert absent not in r, (absent, r)
    assert ("counted_flops" in r) == (r["step"] == 3), r
counted = steps[2]["counted_flops"]
assert abs(steps[2]["flops"] / counted - 1) < 0.02, (steps[2]["flops"], counted)
# The same global batches at 1 rank (4 rows, the same micro-batches): the same loss and norm within
# 1e-5, twice the 64 u (3.8e-6) by which fsdp_equivalence_test holds each run's fp32 loss to float64.
ref = [json.loads(l) for l in open(f"{one}/metrics.jsonl") if '"step":' in l]
assert len(ref) == 3
for a, b in zip(steps, ref):
    assert a["tokens"] == b["tokens"], (a, b)
    for key in ("loss", "grad_norm"):
        assert math.isclose(a[key], b[key], rel_tol=1e-5), (key, a, b)
assert len(evals) == 1 and evals[0]["after_step"] == 12 and evals[0]["eval_epoch"] == 1, evals
e = evals[0]
assert math.isclose(e["val_perplexity"], math.exp(e["val_loss"]), rel_tol=1e-12), e
log = open(f"{two}/logs/rank-00000.log").read()
m = re.search(r"epoch 1 validation: loss ([0-9.]+), perplexity ([0-9.]+) \((\d+) batch", log)
assert m and abs(float(m.group(1)) - e["val_loss"]) < 1e-4 and int(m.group(3)) == e["val_batches"] == 2, (m, e)
recipes = json.load(open(f"{two}/metrics_data.json"))
assert recipes["train_step_loss"] == [r["loss"] for r in steps], recipes
assert math.isclose(recipes["train_epoch_loss"][0], sum(r["loss"] for r in steps) / 12, rel_tol=1e-12)
assert recipes["val_epoch_loss"] == [e["val_loss"]] and recipes["val_epoch_perplexity"] == [e["val_perplexity"]]
for rank in (0, 1):
    trace = json.load(open(f"{two}/profiler/rank-{rank:05d}.trace.json"))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and e["pid"] == rank for e in events)
    names = {e["name"] for e in events}
    ranges = {e["name"].split(" ")[0] for e in events if e["cat"] == "user_annotation"}
    for want in ("fsdp.forward", "fsdp.backward", "fsdp.all_gather.start", "fsdp.all_gather.wait",
                 "fsdp.reduce_scatter.start", "optimizer.step", "data.wait", "checkpoint.save"):
        assert want in ranges, (rank, want, ranges)
    steps_traced = sorted(n for n in names if n.startswith("step "))
    assert steps_traced == ["step 6", "step 7"], steps_traced
    assert {"fsdp.forward embed", "fsdp.forward block1", "fsdp.backward head"} <= names, sorted(names)[:20]
    assert "aten::mm" in names or "aten::addmm" in names, sorted(names)[:20]
    # The order collectives are issued in backward: inside each block's backward, the previous
    # unit's all-gather (the prefetch) starts before this block's reduce-scatter, so it never
    # queues behind it; and no backward gathers the embedding (its backward reads the ids alone).
    user = [e for e in events if e["cat"] == "user_annotation"]
    def inside(outer, prefix):
        return [e["ts"] for e in user if e["name"] == prefix and outer["ts"] <= e["ts"] <= outer["ts"] + outer["dur"]]
    ordered = 0
    for back in (e for e in user if e["name"].startswith("fsdp.backward ")):
        unit = back["name"].split(" ")[1]
        assert not inside(back, "fsdp.all_gather.start embed"), (rank, back["name"])
        if not unit.startswith("block") or unit == "block0":
            continue
        before = f"block{int(unit[5:]) - 1}"
        reduce, gather = inside(back, f"fsdp.reduce_scatter.start {unit}"), inside(back, f"fsdp.all_gather.start {before}")
        if reduce:
            assert gather and min(gather) < min(reduce), (rank, unit, gather, reduce)
            ordered += 1
    assert ordered > 0, "no block's backward both prefetched and reduced"
print(f"flop counter: step 3 counted {counted:.6g} FLOPs, the estimate {steps[2]['flops'] / counted:.4f} of it; "
      f"traces of steps 6-7 with {len(events)} events on rank 1")
print(f"{len(steps)} steps: {steps[-1]['tokens_per_second']:.0f} tokens/s, MFU {steps[-1]['mfu']:.3%} of 0.5 TFLOP/s, "
      f"peak RSS {steps[-1]['peak_rss_bytes'] >> 20} MiB; validation loss {e['val_loss']:.4f}")
PY

# A resume from step 6 keeps steps 1..6 of the file and appends 7..12 again, bitwise the same.
cp -r "$tmp/two" "$tmp/again"
run again 2 --set "checkpoint.resume=$tmp/again/checkpoints/step-0000006"
strip() { sed 's/, "step_seconds".*//' "$1"; }
grep -q "resuming at step 6" "$tmp/again/logs/rank-00000.log" || fail "the run did not resume at step 6"
[ "$(strip "$tmp/again/metrics.jsonl")" = "$(strip "$tmp/two/metrics.jsonl")" ] ||
  fail "after resuming at step 6, metrics.jsonl is not the uninterrupted run's: $(diff <(strip "$tmp/two/metrics.jsonl") <(strip "$tmp/again/metrics.jsonl") | head -5)"

$py tests/cli/tensorboard_check.py "$tmp/two" 1 || fail "the first run's TensorBoard files are not its metrics.jsonl"
$py tests/cli/tensorboard_check.py "$tmp/again" 2 || fail "after the resume, TensorBoard's files are not metrics.jsonl"

# A folder that cannot be made (a file is in the way): a warning, and training goes on to its end.
mkdir -p "$tmp/blocked" && touch "$tmp/blocked/tensorboard"
run blocked 1 --set train.max_train_step=2 --set metrics.use_profiler=false --set metrics.flop_counter=false
grep -q "cannot write the TensorBoard events" "$tmp/blocked/logs/rank-00000.log" ||
  fail "an unwritable TensorBoard folder gave no warning"
[ "$(grep -c '"step":' "$tmp/blocked/metrics.jsonl")" -eq 2 ] || fail "an unwritable TensorBoard folder stopped training"

"$st" validate "$tmp/job.toml" --set metrics.jsonl=false --set metrics.save_metrics=false >"$tmp/tbjsonl.log" 2>&1 &&
  fail "tensorboard without jsonl was accepted"
grep -q "tensorboard = true writes the records of metrics.jsonl" "$tmp/tbjsonl.log" ||
  fail "tensorboard without jsonl: $(cat "$tmp/tbjsonl.log")"

"$st" run "$tmp/job.toml" -n 2 --set "job.output_dir=$tmp/nojsonl" --set metrics.jsonl=false >"$tmp/nojsonl.log" 2>&1 &&
  fail "save_metrics without jsonl was accepted"
grep -q "save_metrics = true is made from metrics.jsonl" "$tmp/nojsonl.log" ||
  fail "save_metrics without jsonl: $(tail -3 "$tmp/nojsonl.log")"
"$st" validate "$tmp/job.toml" --set metrics.flop_counter_start=5 >"$tmp/overlap.log" 2>&1 &&
  fail "a flop counter step inside the profiled steps was accepted"
grep -q "the flop counter's step (6) falls inside the profiled steps (5..7)" "$tmp/overlap.log" ||
  fail "flop counter inside the profiled steps: $(cat "$tmp/overlap.log")"
printf '[job]\nname = "x"\n[train]\nsave_metrics = true\n' >"$tmp/recipes.toml"
"$st" submit "$tmp/recipes.toml" --dry-run >"$tmp/recipes.log" 2>&1 && fail "[train] save_metrics was accepted"
grep -q "save_metrics is \[metrics\] save_metrics here" "$tmp/recipes.log" ||
  fail "[train] save_metrics: $(cat "$tmp/recipes.log")"

[ "$failures" -eq 0 ] && echo "metrics_test: all checks passed"
exit $((failures > 0))
