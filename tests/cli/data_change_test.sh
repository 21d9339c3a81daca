#!/usr/bin/env bash
# A resume over other data is refused, naming what changed, and nothing is trained or saved; with
# [checkpoint] on_data_change = "new_schedule" the checkpoint's weights train the new data from its
# first sample; checkpoints of the same step, and step folders without a manifest, are set aside
# with a log line, never deleted:
#  - tiny alpaca, 2 ranks, stopped after 6 steps (max_train_step), then resumed with train.seed,
#    data.val_fraction (other training tokens), batching_strategy or context_length changed: each
#    start fails before training, its log names the item ("train.seed: 42 in the checkpoint, 7 now";
#    the tokens with the token file's split), and the checkpoint folder is as it was;
#  - the same job resumed unchanged goes on from step 6 (a copied data file, the same tokens, too);
#  - on_data_change = "new_schedule" with another seed: the log says so, metrics.jsonl restarts at
#    step 1 on the new order's first samples, and the old history's later steps are set aside;
#  - a step folder whose manifest was lost is named in the log and not resumed; the next save of
#    its step sets it aside with its rank files;
#  - a run ended mid-epoch by max_train_step, then resumed, validates at each start's end and
#    never an "epoch 0".
# usage: data_change_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
py=/usr/bin/python3

cp configs/data/tiny-alpaca.json "$tmp/train.json"
out=$tmp/run
run() {  # run EXTRA_SET...: the job in $out, 2 ranks
  "$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$out" --set "data.train_file=$tmp/train.json" \
    --set train.run_validation=false --set checkpoint.every_steps=3 --set checkpoint.keep_last=10 \
    --set metrics.sample_ids=true "$@" >>"$tmp/log" 2>&1
}
listing() { (cd "$out/checkpoints" && ls -A | sort | tr '\n' ' '); }
log0() { cat "$out/logs/rank-00000.log"; }

run --set train.max_train_step=6 --set slurm.cpus_per_task=3 || fail "the first start failed: $(tail -5 "$tmp/log")"
grep -q "note: run starts the ranks on this machine with mpirun; only submit uses slurm.cpus_per_task" "$tmp/log" ||
  fail "cpus_per_task under run is not named as a key only submit uses"
log0 | grep -qE "model: [0-9.]+M parameters, [1-9][0-9]* trainable \(0 frozen tensors\)" ||
  fail "the model line does not count the trainable parameters: $(grep "model:" "$out/logs/rank-00000.log")"
[ -f "$out/checkpoints/step-0000006/manifest.json" ] || fail "no checkpoint of step 6: $(listing)"
before=$(listing)

# Each change is refused before training, naming what changed; nothing is written.
check_refused() {  # check_refused PATTERN SET...
  local pattern=$1
  shift
  : >"$out/logs/rank-00000.log"
  run --set train.max_train_step=9 "$@"
  local rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 75 ] || fail "a resume with $* exited $rc"
  grep -q -- "$pattern" "$out/logs/rank-00000.log" || fail "a resume with $*: the log does not say '$pattern': $(tail -5 "$out/logs/rank-00000.log")"
  grep -q "on_data_change = \"new_schedule\"" "$out/logs/rank-00000.log" || fail "a resume with $*: no hint"
  [ "$(listing)" = "$before" ] || fail "a refused resume with $* changed the checkpoints: $(listing)"
}
check_refused "train.seed: 42 in the checkpoint, 7 now" --set train.seed=7
check_refused "training tokens: 2000 examples, .* in the checkpoint, 1600 examples, .* now" \
  --set data.val_fraction=0.2 --set train.run_validation=true
grep -q "the token file's split: none in the checkpoint, val_fraction=0.2 seed=42 now" "$out/logs/rank-00000.log" ||
  fail "the token file's input that changed is not named: $(grep "token file" "$out/logs/rank-00000.log")"
check_refused "train.batching_strategy: packing in the checkpoint, padding now" --set train.batching_strategy=padding
check_refused "train.context_length: 128 in the checkpoint, 96 now" --set train.context_length=96

# The same data in another file (same tokens): the resume goes on from step 6.
cp "$tmp/train.json" "$tmp/copy.json"
: >"$out/logs/rank-00000.log"
run --set train.max_train_step=9 --set "data.train_file=$tmp/copy.json" || fail "the unchanged resume failed: $(tail -5 "$tmp/log")"
log0 | grep -q "loaded checkpoint .*step-0000006" || fail "the unchanged resume did not load step 6"
[ -f "$out/checkpoints/step-0000009/manifest.json" ] || fail "the unchanged resume did not reach step 9: $(listing)"

# A new schedule on purpose: another order, from its first sample, at step 1.
: >"$out/logs/rank-00000.log"
run --set train.max_train_step=3 --set train.seed=7 --set checkpoint.on_data_change=new_schedule ||
  fail "the new schedule failed: $(tail -5 "$tmp/log")"
log0 | grep -q "start a new schedule over this data" || fail "the new schedule is not said: $(tail -5 "$out/logs/rank-00000.log")"
$py - "$out/metrics.jsonl" <<'PY' || fail "metrics.jsonl does not restart at step 1 of the new schedule"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l]
assert [s["step"] for s in steps] == [1, 2, 3], [s["step"] for s in steps]
assert steps[0]["epoch"] == 1 and steps[0]["samples"][0] == 0, steps[0]
PY
for s in 6 9; do
  ls -d "$out/checkpoints/step-000000$s.abandoned-"* >/dev/null 2>&1 || fail "step $s of the old history was not set aside: $(listing)"
done
log0 | grep -q "set aside .*step-0000006" || fail "the set-aside steps are not logged"

# A step folder whose manifest was lost: named, not resumed, set aside (whole) when saved again.
rm "$out/checkpoints/step-0000003/manifest.json"
: >"$out/logs/rank-00000.log"
run --set train.max_train_step=3 --set train.seed=7 || fail "the start after the lost manifest failed"
log0 | grep -q "step-0000003 has no manifest.json: not a committed checkpoint" || fail "the folder without a manifest is not named"
whole=0
for d in "$out/checkpoints/step-0000003.abandoned-"*; do
  [ -f "$d/rank-00000.h5" ] && [ -f "$d/rank-00001.h5" ] && [ ! -f "$d/manifest.json" ] && whole=1
done
[ $whole -eq 1 ] || fail "the folder without a manifest was not set aside whole: $(listing)"
[ -f "$out/checkpoints/step-0000003/manifest.json" ] || fail "step 3 was not saved again: $(listing)"

# A run that max_train_step ends mid-epoch validates what it trained; its resume owes no validation
# (once, an "epoch 0" one was run at every such resume).
v=$tmp/validated
for steps in 3 6; do
  "$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$v" --set "data.train_file=$tmp/train.json" \
    --set train.max_train_step=$steps >>"$tmp/log" 2>&1 || fail "the validated run to step $steps failed"
done
grep -q "epoch 0 validation" "$v/logs/rank-00000.log" && fail "a resume validated an epoch 0"
evals=$($py -c 'import json, sys; print([json.loads(l)["eval_epoch"] for l in open(sys.argv[1]) if "eval_epoch" in l])' "$v/metrics.jsonl")
[ "$evals" = "[1, 1]" ] || fail "validations of epochs $evals, not [1, 1] (each start's end, in epoch 1)"

((failures == 0)) && echo "PASS"
exit $((failures > 0))
