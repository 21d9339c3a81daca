#!/usr/bin/env bash
# Keys of [train] that shape evaluation, data loading and what trains, each tested through the job
# key itself on configs/tiny-alpaca.toml at 2 ranks (54 validation rows of 128 tokens):
#  - val_batch_size: validation runs floor(54 / (2 x val_batch_size)) batches of that many rows;
#  - max_eval_step: caps them, and evaluates another subset (another loss);
#  - num_workers_dataloader: 3 collates up to 3 steps ahead on their own threads, 0 on the training
#    thread, with bitwise the same losses;
#  - freeze_layers / num_freeze_layers: block 0 bitwise unchanged between two checkpoints while
#    block 1 trains.
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

run val3 2 --set train.val_batch_size=3
grep -q "validation data: .* packed into 54 rows of 128" "$tmp/val3.log" || fail "the validation set is not 54 rows"
validation val3 | grep -q "(9 batch(es) of 3 row(s) per rank)" || fail "val_batch_size = 3: $(validation val3)"
run val5 2 --set train.val_batch_size=5
validation val5 | grep -q "(5 batch(es) of 5 row(s) per rank)" || fail "val_batch_size = 5: $(validation val5)"
run eval2 2 --set train.val_batch_size=3 --set train.max_eval_step=2
validation eval2 | grep -q "(2 batch(es) of 3 row(s) per rank, max_eval_step = 2)" || fail "max_eval_step = 2: $(validation eval2)"
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
  --set train.run_validation=false
grep -q "(9 frozen tensors)" "$tmp/frozen.log" || fail "freeze_layers: $(grep -o '([0-9]* frozen tensors[^)]*)' "$tmp/frozen.log")"
"$ckpt" diff "$tmp/frozen/checkpoints/step-0000002" "$tmp/frozen/checkpoints/step-0000004" >"$tmp/diff" 2>/dev/null
changed() { grep "^$1" "$tmp/diff" | grep -v -c "max abs 0.000e+00"; }
[[ "$(grep -c '^model.layers.0.' "$tmp/diff")" -eq 9 && "$(changed model.layers.0.)" -eq 0 ]] ||
  fail "block 0 changed while frozen: $(grep '^model.layers.0.' "$tmp/diff" | head -3)"
[[ "$(changed model.layers.1.)" -gt 0 ]] || fail "block 1 did not train"

echo "job_keys_test: $failures failure(s)"
[[ $failures -eq 0 ]]
