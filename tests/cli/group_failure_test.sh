#!/usr/bin/env bash
# A communicator that fails during a step (as one with an asynchronous NCCL error, or whose
# collective the watchdog gave up on, would): its partial sums never update the weights nor reach
# a checkpoint. Rank 1 marks its shard group failed in step 3, once backward's collectives are done
# (SHARDTUNE_TEST_GROUP_FAIL_AT); every rank stops before the optimizer step with an error naming
# the group, and the newest committed checkpoint is step 2's, its optimizer step count 2.
# usage: group_failure_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1

for group in shard world; do
  out=$tmp/$group
  SHARDTUNE_TEST_GROUP_FAIL_AT=3:1:$group "$st" run configs/tiny-cpu.toml -n 2 --set "job.output_dir=$out" \
    --set train.max_train_step=5 --set checkpoint.every_steps=1 --set fsdp.save_optimizer=true \
    --set train.run_validation=false >"$tmp/$group.log" 2>&1 && fail "$group: the job went on past a failed group"
  # Under FULL_SHARD the shard group is the world's communicator: "the world/shard group failed".
  grep -rqhE "the ([a-z]+/)*$group(/[a-z]+)* group failed: marked failed" "$out/logs" "$tmp/$group.log" ||
    fail "$group: no error names the failed group: $(tail -3 "$tmp/$group.log")"
  grep -rqh "the optimizer step was not taken" "$out/logs" "$tmp/$group.log" || fail "$group: the step was not said to be stopped"
  newest=$(ls "$out/checkpoints" 2>/dev/null | grep -E '^step-[0-9]+$' | sort | tail -1)
  [ "$newest" = step-0000002 ] || fail "$group: the newest checkpoint is '$newest', not step 2's"
  /usr/bin/python3 - "$out/checkpoints/$newest/manifest.json" <<'PY' || fail "$group: step 2's checkpoint does not hold 2 optimizer steps"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["step"] == 2 and m["optimizer_step"] == 2, (m["step"], m["optimizer_step"])
PY
done

[ "$failures" -eq 0 ] && echo "PASS: a group failed mid-step stops it before the update; nothing of it is committed"
exit $((failures > 0))
