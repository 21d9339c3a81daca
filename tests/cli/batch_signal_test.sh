#!/bin/bash
# The batch script's stop signal is never lost, whenever it arrives after the script announced its
# start: the generated script runs under bash with srun and scontrol replaced by stand-ins, and one
# USR1 reaches the batch shell at a random moment (as `scancel --signal=USR1 --batch` sends it).
# Every run must pass the stop on to the ranks, requeue from their checkpoint, and print no shell
# error. (Bash 5.2 drops a trap that fires while it expands a `$(...)`: a script using them fails
# here within a few runs.) The stand-in ranks commit real checkpoints, made beforehand by a short
# run: the script judges progress by the newest commit (`shardtune checkpoint-position`), as the
# ranks choose what to resume. A last run rolls back: the ranks commit a lower step than the one
# they started from, under a higher commit number, and the job must requeue (counting steps, it
# would not).
# usage: batch_signal_test.sh SHARDTUNE SOURCE_DIR [RUNS]
set -u
st=$1 src=$2 runs=${3:-24}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Real checkpoints: steps 1-4 of a run (commits 1-4), then a run resumed from step 1 that commits
# steps 2 and 3 again (commits 5 and 6) and sets the abandoned step 4 aside.
made="$work/made"
run_tiny() {
  (cd "$src" && "$st" run configs/tiny-cpu.toml -n 1 --set "job.output_dir=$made" --set checkpoint.every_steps=1 \
    --set train.run_validation=false --set metrics.log_every_steps=1 "$@") >>"$work/made.log" 2>&1 ||
    { echo "FAIL: the run making checkpoints failed:"; tail -20 "$work/made.log"; exit 1; }
}
run_tiny --set train.max_train_step=4 --set checkpoint.keep_last=10
cp -r "$made/checkpoints/step-0000001" "$work/template-step-1"
cp -r "$made/checkpoints/step-0000004" "$work/template-step-4"
run_tiny --set train.max_train_step=3 --set checkpoint.keep_last=10 --set "checkpoint.resume=$made/checkpoints/step-0000001"
[[ "$("$st" checkpoint-position "$made/checkpoints")" == "6 3" ]] ||
  fail "after the rollback the newest checkpoint is not step 3, commit 6: $("$st" checkpoint-position "$made/checkpoints")"
ls -d "$made"/checkpoints/step-0000004.abandoned-* >/dev/null 2>&1 || fail "the abandoned step 4 was not set aside"
cp -r "$made/checkpoints/step-0000003" "$work/template-step-3-rollback"
export TEMPLATE="$work/template-step-1"

out="$work/out"
"$st" submit --dry-run "$src/tests/slurm/tiny-2x2.toml" --set "job.output_dir=$out" >"$work/batch.sh" 2>"$work/err" ||
  { echo "FAIL: dry run: $(cat "$work/err")"; exit 1; }

# srun: the ranks. They install their handler, say they are ready, and on USR1 commit a checkpoint
# and exit 75 (stopped, requeue me), as shardtune-rank does.
mkdir -p "$work/bin"
cat >"$work/bin/srun" <<'SH'
#!/bin/bash
stop() {
  if [[ -n "${ROLLBACK:-}" ]]; then mv "$CK/step-0000004" "$CK/step-0000004.abandoned-test"; fi
  cp -r "$TEMPLATE" "$CK/$(basename "$TEMPLATE" | sed 's/template-step-\([0-9]*\).*/step-000000\1/')"
  echo stopped >"$MARK"
  exit 75
}
trap stop USR1
touch "$OUT/.ranks-ready-$SLURM_JOB_ID"
for _ in $(seq 1 1200); do sleep 0.05; done  # a minute at least, for a busy machine
echo "never signalled" >"$MARK"
exit 0
SH
cat >"$work/bin/scontrol" <<'SH'
#!/bin/bash
case "$1" in
  show) echo "JobId=$SLURM_JOB_ID JobState=RUNNING" ;;
  requeue) echo "requeue $2" >>"$REQUEUES" ;;
esac
SH
chmod +x "$work/bin/srun" "$work/bin/scontrol"

export PATH="$work/bin:$PATH" SLURM_JOB_NUM_NODES=2 SLURM_JOB_NODELIST='n[1-2]'
for ((i = 1; i <= runs; i++)); do
  rm -rf "$out"
  mkdir -p "$out"
  log="$work/run-$i.log"
  export SLURM_JOB_ID=$i
  export OUT="$out" CK="$out/checkpoints" MARK="$work/mark-$i" REQUEUES="$work/requeues-$i"
  bash "$work/batch.sh" >"$log" 2>&1 &
  pid=$!
  # Its traps are set once it announces the start; a slow machine may take a while to get there.
  deadline=$((SECONDS + 120))
  until grep -qs '(start 1)' "$log" || ((SECONDS > deadline)); do sleep 0.01; done
  # A moment between 0 and 60 ms after the start was announced: locks, the ranks' launch, the wait.
  sleep "0.0$((RANDOM % 60 / 10))$((RANDOM % 10))"
  kill -USR1 "$pid"
  wait "$pid"
  rc=$?
  why=""
  [[ $rc -eq 0 ]] || why+=" exit $rc;"
  grep -q 'received SIGUSR1' "$log" || why+=" the trap did not run;"
  [[ "$(cat "$MARK" 2>/dev/null)" == stopped ]] || why+=" the ranks were not stopped ($(cat "$MARK" 2>/dev/null));"
  [[ "$(cat "$REQUEUES" 2>/dev/null)" == "requeue $i" ]] || why+=" no requeue;"
  grep -E 'unexpected EOF|syntax error|command not found' "$log" >/dev/null && why+=" shell errors;"
  if [[ -n "$why" ]]; then
    fail "run $i:$why"
    sed 's/^/    /' "$log"
  fi
done

# The rollback: the job starts from step 4 (commit 4); its ranks commit step 3 as commit 6.
rm -rf "$out"
mkdir -p "$out/checkpoints"
cp -r "$work/template-step-4" "$out/checkpoints/step-0000004"
export SLURM_JOB_ID=1000 MARK="$work/mark-rollback" REQUEUES="$work/requeues-rollback" ROLLBACK=1
export TEMPLATE="$work/template-step-3-rollback"
log="$work/run-rollback.log"
bash "$work/batch.sh" >"$log" 2>&1 &
pid=$!
deadline=$((SECONDS + 120))
until grep -qs '(start 1)' "$log" || ((SECONDS > deadline)); do sleep 0.01; done
sleep 0.5
kill -USR1 "$pid"
wait "$pid"
grep -q 'last checkpoint: step 4' "$log" || fail "rollback: the start did not see step 4"
[[ "$(cat "$REQUEUES" 2>/dev/null)" == "requeue 1000" ]] ||
  { fail "rollback: a start that committed step 3 after step 4 was not requeued"; sed 's/^/    /' "$log"; }
((failures == 0)) && echo "batch script: the stop signal reached the ranks in $runs of $runs runs, and a rollback requeues"
exit $((failures > 0))
