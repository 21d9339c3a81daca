#!/usr/bin/env bash
# [train] optimizer = "adamw_8bit" and "adafactor" end to end, through `shardtune run` (2 ranks):
#  - on configs/tiny-alpaca.toml, 8-bit AdamW's mean loss of steps 281-300 is within 2% of fp32
#    AdamW's (the same data order, the same schedule), Adafactor's at most 5% above it (9.9% below
#    it on this machine), each with less optimizer state (as rank 0 logs them);
#  - for each, 20 steps straight and 10 steps + checkpoint + a new job resuming for 10 give
#    identical losses and the same final checkpoint, every kind of every tensor bit for bit
#    (shardtune-ckpt diff): 8-bit AdamW's moments decoded and their scales; Adafactor's row and
#    column means, vector moments and first moments;
#  - the checkpoint verifies, consolidates and reshards (to 3 ranks) to the same tensors, and a
#    3-rank job resumes the resharded copy;
#  - a job of another optimizer refuses to resume it, naming both.
# usage: optimizers_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT
set -u
st=$1 src=$2 ckpt=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
py=/usr/bin/python3

run() {  # run NAME RANKS STEPS [--set ...]: tiny-alpaca; its log in $tmp/NAME.log
  local name=$1 ranks=$2 steps=$3
  shift 3
  "$st" run configs/tiny-alpaca.toml -n "$ranks" --set "job.output_dir=$tmp/$name" --set train.max_train_step="$steps" \
    --set train.run_validation=false --set metrics.log_every_steps=1 "$@" >"$tmp/$name.log" 2>&1
}
# For the resumes: StepLR, whose learning rate does not depend on the run's length (the cosine
# schedule of tiny-alpaca.toml ends at max_train_step).
step_lr="--set train.lr_scheduler=step"
losses() { grep '"step":' "$tmp/$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }

# 300 steps of each optimizer.
run fp32 2 300 --set checkpoint.every_steps=0 || fail "the fp32 AdamW run failed: $(tail -5 "$tmp/fp32.log")"
for opt in adamw_8bit adafactor; do
  run "$opt" 2 300 --set checkpoint.every_steps=0 --set train.optimizer=$opt ||
    fail "the $opt run failed: $(tail -5 "$tmp/$opt.log")"
done
$py - "$tmp/fp32" "$tmp/adamw_8bit" "$tmp/adafactor" <<'PY' || fail "a low-memory optimizer's loss or state is off"
import json, re, sys
runs = []
for out in sys.argv[1:]:
    path = out + "/metrics.jsonl"
    said = re.search(r"optimizer: .*, (\d+) bytes of state on this rank", open(out + "/logs/rank-00000.log").read())
    assert said, "the rank does not log its optimizer state"

    rows = [json.loads(l) for l in open(path) if '"step":' in l]
    rows = [r for r in rows if "loss" in r]
    assert rows[-1]["step"] == 300, rows[-1]
    late = [r["loss"] for r in rows if 281 <= r["step"] <= 300]
    assert len(late) == 20, len(late)
    runs.append((sum(late) / len(late), rows[0]["loss"], int(said.group(1))))
(fp32, first32, bytes32), (eight, first8, bytes8), (factor, firstf, bytesf) = runs
print(f"mean loss of steps 281-300: AdamW {fp32:.4f}, 8-bit AdamW {eight:.4f} ({eight / fp32 - 1:+.2%}), "
      f"Adafactor {factor:.4f} ({factor / fp32 - 1:+.2%}); all from {first32:.4f}")
assert fp32 < 0.5 * first32, "AdamW did not train"
assert abs(eight / fp32 - 1) <= 0.02
assert factor <= 1.05 * fp32
# The tiny model keeps fp32 moments for its embedding (a tenth of it) and its small tensors (k_proj and
# v_proj of 2048 elements, the norms): 0.59 of AdamW's state on rank 0 of 2. A large tensor's is 0.254
# (adam8bit_test, StateIsAQuarterOfAdamWs; bench/adamw.sh for the 0.12B model's tensors).
# Adafactor without a first moment keeps each matrix's rows and columns.
print(f"optimizer state of rank 0: 8-bit AdamW {bytes8} / {bytes32} bytes = {bytes8 / bytes32:.3f}, "
      f"Adafactor {bytesf} = {bytesf / bytes32:.3f}")
assert bytes8 / bytes32 <= 0.6
assert bytesf / bytes32 <= 0.1
PY

# What each optimizer's checkpoint holds: the manifest's optimizer and state kinds.
check_manifest() {  # check_manifest OPTIMIZER CHECKPOINT
  $py - "$1" "$2" <<'PY'
import json, sys
opt, path = sys.argv[1:]
m = json.load(open(path + "/manifest.json"))
assert m["optimizer"] == opt, m.get("optimizer")
kinds = {s["kind"] for s in m["slices"]}
shape = lambda s: m["tensors"][s["tensor"]]["shape"]
if opt == "adamw_8bit":
    assert m["state_block"] == 256, m.get("state_block")
    assert kinds == {"param", "exp_avg", "exp_avg_sq", "exp_avg_absmax", "exp_avg_sq_absmax"}, kinds
else:  # Adafactor without a first moment: each matrix's row and column means, each vector's second moment
    assert kinds == {"param", "exp_avg_sq", "exp_avg_sq_row", "exp_avg_sq_col"}, kinds
    for s in m["slices"]:
        if s["kind"] == "exp_avg_sq_row":
            assert s["offset"] + s["length"] <= shape(s)[0], s
        if s["kind"] == "exp_avg_sq":
            assert len(shape(s)) == 1, s
PY
}

for opt in adamw_8bit adafactor; do
  # Resumed exactly at the same world size.
  ck="--set fsdp.save_optimizer=true --set checkpoint.every_steps=10 --set train.optimizer=$opt $step_lr"
  # shellcheck disable=SC2086
  run "$opt-straight" 2 20 $ck || fail "$opt: the straight run failed: $(tail -5 "$tmp/$opt-straight.log")"
  # shellcheck disable=SC2086
  run "$opt-resumed" 2 10 $ck || fail "$opt: the first half failed: $(tail -5 "$tmp/$opt-resumed.log")"
  # shellcheck disable=SC2086
  run "$opt-resumed" 2 20 $ck || fail "$opt: the resumed half failed: $(tail -5 "$tmp/$opt-resumed.log")"
  grep -q "resuming at step 10" "$tmp/$opt-resumed/logs/rank-00000.log" || fail "$opt: the second half did not resume at step 10"
  [ "$(losses "$opt-straight")" = "$(losses "$opt-resumed")" ] || fail "$opt: the resumed losses differ from the straight run's"
  c10=$tmp/$opt-straight/checkpoints/step-0000010 c20=$tmp/$opt-straight/checkpoints/step-0000020
  "$ckpt" diff "$c20" "$tmp/$opt-resumed/checkpoints/step-0000020" >"$tmp/diff" 2>&1 ||
    fail "$opt: the resumed run's final checkpoint differs: $(head -5 "$tmp/diff")"
  check_manifest "$opt" "$c20" || fail "the checkpoint does not hold $opt's state"

  # The tools: verify, consolidate, reshard to 3 and resume it there.
  "$ckpt" verify "$c10" >/dev/null || fail "verify rejects a $opt checkpoint"
  "$ckpt" consolidate "$c10" "$tmp/$opt-full" 2>/dev/null || fail "$opt: consolidate failed"
  "$ckpt" diff "$c10" "$tmp/$opt-full" >/dev/null || fail "$opt: consolidate changed the state"
  "$ckpt" reshard "$c10" "$tmp/$opt-three" -w 3 2>/dev/null || fail "$opt: reshard to 3 failed"
  "$ckpt" diff "$c10" "$tmp/$opt-three" >/dev/null || fail "$opt: reshard to 3 changed the state"
  mkdir -p "$tmp/$opt-at3/checkpoints" && cp -r "$tmp/$opt-three" "$tmp/$opt-at3/checkpoints/step-0000010"
  # shellcheck disable=SC2086
  run "$opt-at3" 3 12 $ck || fail "$opt: a 3-rank job did not resume the resharded checkpoint: $(tail -5 "$tmp/$opt-at3.log")"
  grep -q "resuming at step 10" "$tmp/$opt-at3/logs/rank-00000.log" || fail "$opt: the 3-rank job did not resume at step 10"

  # Another optimizer: refused, naming both.
  mkdir -p "$tmp/$opt-other/checkpoints" && cp -r "$c10" "$tmp/$opt-other/checkpoints/step-0000010"
  # shellcheck disable=SC2086
  run "$opt-other" 2 12 --set fsdp.save_optimizer=true --set checkpoint.every_steps=10 $step_lr &&
    fail "an AdamW job resumed a $opt checkpoint"
  grep -q "holds the state of optimizer \"$opt\", and this job.s \[train\] optimizer is \"adamw\"" "$tmp/$opt-other"/logs/*.log "$tmp/$opt-other.log" 2>/dev/null ||
    fail "$opt: the refusal does not name both optimizers: $(grep -h -i error "$tmp/$opt-other.log" | head -3)"
done

[ "$failures" -eq 0 ] && echo "8-bit AdamW and Adafactor end to end: all passed"
exit $((failures > 0))
