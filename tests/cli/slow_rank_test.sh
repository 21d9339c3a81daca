#!/usr/bin/env bash
# A rank made slow inside checkpoint work, with a collective timeout far shorter than the delay:
# it says it is busy (the watchdog's census hears it), so the others wait for it and the job is
# not stopped with it named lost.
#  - rank 1's fsyncs take 5 s (its rank file written, blocking save) while collective_timeout_s is 2;
#  - rank 0's pruning of an old checkpoint takes 5 s (unlink), blocking and [checkpoint] async;
#  - rank 0's fsyncs take 5 s during the commit (the manifest, the folder).
# Each run trains to the end, commits every checkpoint, and its log shows the wait for the busy rank.
# usage: slow_rank_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1

slow_run() {  # slow_run NAME SLOW_IO STEPS [--set ...]: a checkpoint every 2 steps, the last one kept
  local name=$1 slow=$2 steps=$3
  shift 3
  SHARDTUNE_TEST_SLOW_IO=$slow "$st" run configs/tiny-cpu.toml -n 2 --set "job.output_dir=$tmp/$name" \
    --set launch.collective_timeout_s=2 --set train.max_train_step="$steps" --set checkpoint.every_steps=2 \
    --set checkpoint.keep_last=1 --set train.run_validation=false "$@" >"$tmp/$name.log" 2>&1 ||
    { fail "$name: the job failed with $slow: $(grep -h -m3 -i "never arrived\|error" "$tmp/$name.log" "$tmp/$name"/logs/* 2>/dev/null)"; return; }
  [ -f "$tmp/$name/checkpoints/step-000000$steps/manifest.json" ] && [ ! -e "$tmp/$name/checkpoints/step-0000002" ] ||
    fail "$name: step $steps was not committed, or step 2 not pruned"
  grep -rqh "is busy (" "$tmp/$name/logs" "$tmp/$name.log" || fail "$name: no rank waited for a busy one"
  ! grep -rqh "never arrived" "$tmp/$name/logs" "$tmp/$name.log" || fail "$name: a busy rank was named lost"
}
# Pruning runs after a commit, beside training: the save after next waits for it (step 6).
slow_run fsync-writer fsync:5:1 4
slow_run unlink-pruner unlink:5:0 6
slow_run unlink-pruner-async unlink:5:0 6 --set checkpoint.async=true
slow_run fsync-committer fsync:5:0 4

[ "$failures" -eq 0 ] && echo "PASS: ranks busy with checkpoint work are waited for, not named lost"
exit $((failures > 0))
