#!/usr/bin/env bash
# Keys of [train] that shape evaluation, data loading and what trains, each tested through the job
# key itself on configs/tiny-alpaca.toml at 2 ranks (54 validation rows of 128 tokens):
#  - val_batch_size: validation runs ceil(54 / (2 x val_batch_size)) batches, every row once, and
#    the loss (a mean over learned tokens) is the same at any batch size and rank count, a batch
#    larger than the set included;
#  - max_eval_step: caps them, and evaluates another subset (another loss);
#  - num_workers_dataloader: 3 collates up to 3 steps ahead on their own threads, 0 on the training
#    thread, with bitwise the same losses;
#  - freeze_layers / num_freeze_layers: block 0 bitwise unchanged between two checkpoints while
#    block 1 trains; such a checkpoint (moments of some tensors only) reshards; a resume that
#    unfreezes block 0 starts its moments fresh, says so, and trains it.
# (lora_dropout is tested through its key by lora_test.sh.)
# usage: job_keys_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT
set -u
st=$1 src=$2 ckpt=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1

run() {  # run NAME STEPS [--set ...]: tiny-alpaca, 2 ranks; its log in $tmp/NAME.log
  local name=$1 steps=$2
  shift 2
  "$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/$name" --set train.max_train_step="$steps" \
    --set train.num_epochs=1 --set checkpoint.every_steps=0 "$@" >"$tmp/$name.log" 2>&1 ||
    { fail "$name: the run failed"; tail -5 "$tmp/$name.log"; }
}
validation() { grep -o "epoch 1 validation: .*" "$tmp/$1.log"; }
losses() { grep '"step":' "$tmp/$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }

# lr = 1e-12 leaves the weights as initialised, the same at any rank count: only the batches differ.
run val3 2 --set train.val_batch_size=3 --set train.lr=1e-12
grep -q "validation data: .* packed into 54 rows of 128" "$tmp/val3.log" || fail "the validation set is not 54 rows"
validation val3 | grep -q "(9 batch(es) of 3 row(s) per rank: 54 of 54 row(s)" || fail "val_batch_size = 3: $(validation val3)"
run val5 2 --set train.val_batch_size=5 --set train.lr=1e-12
validation val5 | grep -q "(6 batch(es) of 5 row(s) per rank: 54 of 54 row(s)" || fail "val_batch_size = 5: $(validation val5)"
run val32 2 --set train.val_batch_size=32 --set train.lr=1e-12
validation val32 | grep -q "(1 batch(es) of 32 row(s) per rank: 54 of 54 row(s)" || fail "val_batch_size = 32: $(validation val32)"
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/val1rank" --set train.max_train_step=2 \
  --set train.num_epochs=1 --set checkpoint.every_steps=0 --set train.batch_size_training=8 \
  --set train.val_batch_size=7 --set train.lr=1e-12 >"$tmp/val1rank.log" 2>&1 || fail "val1rank: the run failed"
/usr/bin/python3 - "$tmp" <<'PY' || fail "validation depends on the batch size or the rank count"
import json, sys
tmp = sys.argv[1]
def val(name):
    (e,) = [json.loads(l) for l in open(f"{tmp}/{name}/metrics.jsonl") if '"val_loss"' in l]
    assert e["val_rows"] == 54 and e["val_tokens"] > 0 and e["val_loss"] > 0, (name, e)
    return e
ref = val("val3")
# The same weights: only the batches differ, so only the sums' order and the matrix shapes.
for name, bound in (("val5", 1e-6), ("val32", 1e-6), ("val1rank", 1e-6)):
    e = val(name)
    assert e["val_tokens"] == ref["val_tokens"], (name, e, ref)
    assert abs(e["val_loss"] - ref["val_loss"]) <= bound * ref["val_loss"], (name, e["val_loss"], ref["val_loss"])
print("validation: loss", ref["val_loss"], "over", ref["val_rows"], "rows at batch 3, 5, 32 (2 ranks) and 7 (1 rank)")
PY
run eval2 2 --set train.val_batch_size=3 --set train.max_eval_step=2 --set train.lr=1e-12
validation eval2 | grep -q "(2 batch(es) of 3 row(s) per rank, max_eval_step = 2: 12 of 54 row(s)" || fail "max_eval_step = 2: $(validation eval2)"
loss_of() { validation "$1" | sed 's/.*loss \([0-9.]*\),.*/\1/'; }
[[ "$(loss_of eval2)" != "$(loss_of val3)" ]] || fail "max_eval_step = 2 evaluated the same rows as no limit"
echo "validation: $(validation val3); $(validation eval2)"

run workers3 6 --set train.num_workers_dataloader=3 --set train.run_validation=false
run workers0 6 --set train.num_workers_dataloader=0 --set train.run_validation=false
grep -q "data: batches collated up to 3 step(s) ahead, each on its own thread" "$tmp/workers3.log" ||
  fail "num_workers_dataloader = 3 did not collate 3 steps ahead: $(grep 'data: batches' "$tmp/workers3.log")"
grep -q "data: batches collated on the training thread" "$tmp/workers0.log" || fail "num_workers_dataloader = 0"
[[ -s "$tmp/workers3/metrics.jsonl" && "$(losses workers3)" == "$(losses workers0)" ]] ||
  fail "collating ahead changed the losses"

run frozen 4 --set train.freeze_layers=true --set train.num_freeze_layers=1 --set checkpoint.every_steps=2 \
  --set train.run_validation=false --set fsdp.save_optimizer=true
grep -q "(9 frozen tensors)" "$tmp/frozen.log" || fail "freeze_layers: $(grep -o '([0-9]* frozen tensors[^)]*)' "$tmp/frozen.log")"
"$ckpt" diff "$tmp/frozen/checkpoints/step-0000002" "$tmp/frozen/checkpoints/step-0000004" >"$tmp/diff" 2>/dev/null
changed() { grep "^$1" "$tmp/diff" | grep -v -c "max abs 0.000e+00"; }
[[ "$(grep -c '^model.layers.0.' "$tmp/diff")" -eq 9 && "$(changed model.layers.0.)" -eq 0 ]] ||
  fail "block 0 changed while frozen: $(grep '^model.layers.0.' "$tmp/diff" | head -3)"
[[ "$(changed model.layers.1.)" -gt 0 ]] || fail "block 1 did not train"
grep -q "^exp_avg model.layers.0." "$tmp/diff" && fail "a frozen block has optimizer moments"
# A checkpoint with moments of some tensors only reshards, every tensor's state kept.
"$ckpt" reshard "$tmp/frozen/checkpoints/step-0000004" "$tmp/frozen-w3" -w 3 >/dev/null 2>"$tmp/err" ||
  fail "a freeze_layers checkpoint does not reshard: $(cat "$tmp/err")"
"$ckpt" diff "$tmp/frozen/checkpoints/step-0000004" "$tmp/frozen-w3" >/dev/null 2>&1 || fail "resharding changed the checkpoint"
# Unfreezing on resume: block 0 now trains, its moments and AdamW step start fresh, with a line.
run unfrozen 6 --set "job.output_dir=$tmp/frozen" --set train.freeze_layers=false --set checkpoint.every_steps=2 \
  --set train.run_validation=false --set fsdp.save_optimizer=true
grep -q "resuming at step 4" "$tmp/unfrozen.log" || fail "unfreezing: did not resume at step 4: $(grep -m2 -i 'error\|resum' "$tmp/unfrozen.log")"
grep -q "optimizer state starts fresh for 9 tensor(s) that were frozen when .*step-0000004 was saved: model.layers.0.\* (9 tensors)" \
  "$tmp/unfrozen.log" || fail "unfreezing is not logged: $(grep -m1 'optimizer state' "$tmp/unfrozen.log")"
ls -d "$tmp"/frozen/checkpoints/*.damaged-* >/dev/null 2>&1 && fail "unfreezing set a checkpoint aside as damaged"
"$ckpt" diff "$tmp/frozen/checkpoints/step-0000004" "$tmp/frozen/checkpoints/step-0000006" >"$tmp/diff" 2>/dev/null
[[ "$(changed model.layers.0.)" -gt 0 ]] || fail "block 0 did not train once unfrozen"
# Its AdamW step counts from the resume: 2 steps, where the others took 6 (the manifest records it).
/usr/bin/python3 - "$tmp/frozen/checkpoints/step-0000006/manifest.json" <<'PY' || fail "the unfrozen block's AdamW step"
import json, sys
m = json.load(open(sys.argv[1]))
steps = m.get("moment_steps", {})
assert m["optimizer_step"] == 6, m["optimizer_step"]
assert {k for k in steps} == {k for k in m["tensors"] if k.startswith("model.layers.0.")}, sorted(steps)
assert set(steps.values()) == {2}, steps
PY

echo "job_keys_test: $failures failure(s)"
[[ $failures -eq 0 ]]
