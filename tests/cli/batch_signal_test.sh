#!/bin/bash
# The batch script's stop signal is never lost, whenever it arrives after the script announced its
# start: the generated script runs under bash with srun and scontrol replaced by stand-ins, and one
# USR1 reaches the batch shell at a random moment (as `scancel --signal=USR1 --batch` sends it).
# Every run must pass the stop on to the ranks, requeue from their checkpoint, and print no shell
# error. (Bash 5.2 drops a trap that fires while it expands a `$(...)`: a script using them fails
# here within a few runs.)
# usage: batch_signal_test.sh SHARDTUNE SOURCE_DIR [RUNS]
set -u
st=$1 src=$2 runs=${3:-40}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out="$work/out"
"$st" submit --dry-run "$src/tests/slurm/tiny-2x2.toml" --set "job.output_dir=$out" >"$work/batch.sh" 2>"$work/err" ||
  { echo "FAIL: dry run: $(cat "$work/err")"; exit 1; }

# srun: the ranks. They install their handler, say they are ready, and on USR1 commit a checkpoint
# and exit 75 (stopped, requeue me), as shardtune-rank does.
mkdir -p "$work/bin"
cat >"$work/bin/srun" <<'SH'
#!/bin/bash
trap 'mkdir -p "$CK/step-0000001" && ln -sfn step-0000001 "$CK/latest" && echo stopped >"$MARK"; exit 75' USR1
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
((failures == 0)) && echo "batch script: the stop signal reached the ranks in $runs of $runs runs"
exit $((failures > 0))
