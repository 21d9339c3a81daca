#!/usr/bin/env bash
# End-to-end tests of `shardtune submit` on the real Slurm cluster of cluster.sh (2 nodes).
# usage: e2e_test.sh SCENARIO CLUSTER_DIR WORK_DIR SHARDTUNE SOURCE_DIR
#   srun_2x2 | mpirun_2x2   2 nodes x 2 ranks complete; loss falls; a sharded checkpoint is committed
#   mpirun_affinity         mpirun binds each rank to cpus_per_task CPUs of its own: 2 nodes x 1 rank x 2
#                           CPUs, then 2 nodes x 2 ranks x 1 CPU (the affinity each rank logs)
#   hsdp                    HYBRID_SHARD with one shard group per node
#   requeue                 USR1 -> checkpoint -> requeue -> resume -> finish, bitwise equal to a straight run;
#                           the stopped job writes its checkpoints in the background, one in flight at the stop
#   time_limit              a real 1-minute limit: Slurm's USR1 lead signal, requeue, resume, completion
#                           (step budgets that hold on a machine of any speed)
#   early_signal            Slurm's stop signal before the ranks exist: held back until they handle it;
#                           they checkpoint after their first step and requeue (not killed by it)
#   requeue_stress          6 rounds of signal -> checkpoint -> requeue -> resume (STRESS_CYCLES), half
#                           of them signalled as a start begins: every round advances, no step lost
#   killed_after_stop       a rank killed after the stop's checkpoint was committed: still requeued
#   second_writer           the job's script submitted again by hand and `shardtune run` into the same
#                           output directory are refused while the job runs; the job completes
#   resize                  stopped without requeue, resubmitted as 1 node x 3 ranks: resumes and completes
#   kill9                   kill -9 of one rank: FAILED within 60 s, no rank left, rank named, checkpoint intact
#   stream                  a Hugging Face folder streamed into shards across 2 nodes, by one reader per
#                           node (shared memory) and by world rank 0 alone (messages to the other node):
#                           the same losses as every rank loading the whole model
#   hostile                 invalid jobs and hostile strings never reach sbatch or a shell
#   node_loss               min_nodes = 1, alpaca data over 4 epochs: node n2 is killed mid-run (its whole
#                           namespace); the job submits itself again without n2, resumes on n1 alone at 2
#                           ranks, completes, and every sample of every epoch is trained once (sample_ids)
#   diverge                 an lr that makes the loss infinite: exit 3 named by the batch script, no requeue
#   lora                    configs/tiny-lora.toml (2 nodes x 2 ranks): USR1 -> adapter checkpoint -> requeue ->
#                           resume, adapters and moments bitwise equal to a straight run; then resumed by
#                           1 node x 3 ranks; its checkpoints export to PEFT and merge
#   qlora                   the same with configs/tiny-qlora.toml (the base's projections in NF4)
set -u
scenario=$1 cluster=$2 work=$3 st=$4 src=$5
source "$cluster/run/cluster.env" || { echo "FAIL: no cluster in $cluster (cluster.sh start)"; exit 1; }
ckpt_tool=$(dirname "$st")/shardtune-ckpt
py=/usr/bin/python3
# mpirun inside the allocation: as root, and with its traffic on loopback.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_opts='launch.extra_mpirun_options=["--mca","btl","self,vader,tcp","--mca","btl_tcp_if_include","lo","--mca","oob_tcp_if_include","lo","--bind-to","none"]'
out_root="$work/$scenario"
rm -rf "$out_root"
mkdir -p "$out_root"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# One scontrol call per look, parsed by bash: the waits below look every 0.2 s, and a pipeline of
# grep, tr and cut per look cost more CPU than the jobs' own start-up on this 2-core machine.
read_job() {  # read_job JOB: the job's one-line record in JOB_LINE, its state in JOB_STATE (no subshell)
  JOB_LINE=" $(scontrol show job -o "$1" 2>/dev/null)" JOB_STATE=
  [[ $JOB_LINE =~ \ JobState=([A-Z_]+) ]] && JOB_STATE=${BASH_REMATCH[1]}
  return 0
}
field_of_line() {  # field_of_line NAME: the value of NAME= in JOB_LINE
  [[ $JOB_LINE =~ \ $1=([^ ]*) ]] && echo "${BASH_REMATCH[1]}"
}
state() { read_job "$1"; echo "$JOB_STATE"; }
field() { read_job "$1"; field_of_line "$2"; }

wait_state() {  # wait_state JOB SECONDS STATE...: succeeds when the job reaches one of the states
  local job=$1 seconds=$2 s
  shift 2
  local deadline=$((SECONDS + seconds))
  while ((SECONDS < deadline)); do
    read_job "$job"
    for want in "$@"; do [[ "$JOB_STATE" == "$want" ]] && return 0; done
    sleep 0.2
  done
  echo "job $job is $(state "$job") after $seconds s, not $*" >&2
  return 1
}

wait_requeued() {  # wait_requeued JOB RESTARTS SECONDS: until the job waits requeued RESTARTS times, or ends; sets s
  local deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    read_job "$1"
    s=$JOB_STATE
    [[ "$s" == PENDING && "$(field_of_line Restarts)" == "$2" ]] && return 0
    [[ "$s" == COMPLETED || "$s" == FAILED || "$s" == CANCELLED || "$s" == TIMEOUT ]] && return 1
    sleep 0.2
  done
  return 1
}

wait_steps() {  # wait_steps OUT N SECONDS: until metrics.jsonl has N steps
  local deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    [[ -f "$1/metrics.jsonl" ]] && (($(grep -c '"step":' "$1/metrics.jsonl") >= $2)) && return 0
    sleep 0.2
  done
  return 1
}

# Slurm holds a requeued job back (BeginTime, ~2 min); this starts it at once. The requeue revoked
# the job's credential, and slurmd refuses a start whose credential was made within the second of
# that revocation ("Job credential revoked"), which leaves the job ended without rerunning. The
# revocation precedes the PENDING state the caller has seen, so a start asked in a later second is
# accepted.
start_now() {  # start_now JOB: a job seen PENDING after a requeue
  # The earlier start's step daemons must be gone first: the new step binds the same PMIx socket.
  local i
  for ((i = 0; i < 300; i++)); do pgrep -f "slurmstepd: \[$1\." >/dev/null || break; sleep 0.1; done
  local seen=$EPOCHSECONDS
  while ((EPOCHSECONDS <= seen)); do sleep 0.1; done
  scontrol update JobId="$1" StartTime=now
}

# A budget of 100000 steps outlasts a stop signal on a machine of any speed; while the job waits
# requeued, the resolved job that its batch script re-reads gets the real end.
set_max_step() {  # set_max_step OUT N: a job submitted with max_train_step = 100000 ends at step N
  sed -i "s/^max_train_step = 100000$/max_train_step = $2/" "$1/job.toml"
  grep -q "^max_train_step = $2$" "$1/job.toml"
}

submit() {  # submit OUT [--set ...]: prints the job id
  local out=$1
  shift
  "$st" submit "$src/tests/slurm/tiny-2x2.toml" --set "job.output_dir=$out" "$@" 2>>"$out_root/submit.err"
}

submit_lora() {  # submit_lora OUT [--set ...]: configs/tiny-$scenario.toml (lora, qlora) on both nodes; prints the job id
  local out=$1
  shift
  (cd "$src" && "$st" submit "configs/tiny-$scenario.toml" --set "job.output_dir=$out" --set launch.launcher=srun \
    --set slurm.nodes=2 --set slurm.ntasks_per_node=2 --set train.run_validation=false \
    --set checkpoint.every_steps=0 --set train.lr_scheduler=step "$@" 2>>"$out_root/submit.err")
}

# Every slice of a checkpoint with its checksums, in a fixed order: equal lists, equal tensors.
checkpoint_slices() {
  $py - "$1/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for s in sorted(m["slices"], key=lambda s: (s["kind"], s["tensor"], s["offset"])):
    print(s["kind"], s["tensor"], s["offset"], s["crc32_blocks"])
PY
}

show_log() { echo "--- $1"; tail -n 30 "$1"; }

# A completed job: COMPLETED, loss fell, a committed checkpoint (sharded unless TYPE) that verifies, N ranks on M nodes.
check_completed() {  # check_completed OUT JOB RANKS NODES_TEXT [TYPE]
  local out=$1 job=$2 ranks=$3 nodes=$4
  wait_state "$job" 300 COMPLETED FAILED CANCELLED TIMEOUT || true
  [[ "$(state "$job")" == COMPLETED ]] || { fail "job $job ended $(state "$job")"; show_log "$out/slurm-$job.out"; return; }
  $py - "$out/metrics.jsonl" <<'PY' || fail "the loss did not fall"
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"step":' in l]
print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps")
sys.exit(0 if losses[-1] < 0.5 * losses[0] else 1)
PY
  [[ -L "$out/checkpoints/latest" ]] || fail "no committed checkpoint"
  "$ckpt_tool" verify "$out/checkpoints/latest" >/dev/null || fail "the last checkpoint does not verify"
  local type=${5:-sharded}
  grep -q "checkpoint_type = \"$type\"" "$out/job.toml" || fail "the job's checkpoints were not $type"
  grep -q "job 'tiny-2x2': $ranks ranks on $nodes" "$out/slurm-$job.out" ||
    fail "the log does not show $ranks ranks on $nodes"
}

case "$scenario" in
node_loss)
  out="$out_root/run"
  $py - "$src/configs/data/tiny-alpaca.json" "$out_root/train.json" <<'PY'
import json, sys
json.dump(json.load(open(sys.argv[1]))[:150], open(sys.argv[2], "w"))
PY
  job=$(cd "$src" && "$st" submit configs/tiny-alpaca.toml --set "job.output_dir=$out" --set launch.launcher=srun \
    --set slurm.nodes=2 --set slurm.min_nodes=1 --set slurm.ntasks_per_node=2 --set launch.collective_timeout_s=20 \
    --set "data.train_file=$out_root/train.json" --set data.val_fraction=0 --set train.num_epochs=4 \
    --set train.batch_size_training=2 --set train.max_train_step=0 --set train.run_validation=false \
    --set checkpoint.every_steps=5 --set metrics.sample_ids=true 2>>"$out_root/submit.err") ||
    fail "submit failed: $(cat "$out_root/submit.err")"
  log="$out/slurm-$job.out"
  killed=0
  if wait_steps "$out" 12 300; then
    bash "$src/tests/slurm/cluster.sh" kill-node "$cluster" n2
    killed=1
    # The first job's batch script submits the next and cancels its own job, which ends once
    # slurmctld finds n2 gone (SlurmdTimeout) or n2 comes back below; the next job runs meanwhile.
    deadline=$((SECONDS + 400))
    until next=$(tail -n 1 "$out/slurm-job-ids" 2>/dev/null) && [[ -n "$next" && "$next" != "$job" ]] ||
      [[ "$(state "$job")" =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]] || ((SECONDS > deadline)); do
      sleep 0.2
    done
    if [[ "$next" == "$job" || -z "$next" ]]; then
      fail "the job was not submitted again after losing n2 (it ended $(state "$job"))"
      show_log "$log"
    else
      wait_state "$next" 400 COMPLETED FAILED CANCELLED TIMEOUT || true
      grep -q "node(s) n2 lost" "$log" || fail "the batch script did not name the lost node"
      grep -q "resubmitted as Slurm job $next (1 of 3), excluding n2" "$log" || fail "the resubmission is not explained"
      log2="$out/slurm-$next.out"
      [[ "$(state "$next")" == COMPLETED ]] || { fail "the resubmitted job ended $(state "$next")"; show_log "$log2"; }
      grep -q "(start 2)" "$log2" || fail "the resubmitted job does not count itself the second start"
      grep -q "job 'tiny-alpaca': 2 ranks on 1 node(s) (n1)" "$log2" || fail "the second start did not run on n1 alone"
      grep -q "resuming at step" "$log2" || fail "the second start did not resume"
      $py - "$out/metrics.jsonl" <<'PY' || fail "samples were lost or repeated across the node loss"
import collections, json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l]
seen = collections.Counter((r["epoch"], i) for r in records for ids in r["sample_ids"] for i in ids)
samples = {i for _, i in seen}
assert set(seen.values()) == {1}, [k for k, v in seen.items() if v != 1][:5]
assert len(seen) == 4 * len(samples), (len(seen), len(samples))
widths = {len(r["sample_ids"]) for r in records}
assert widths == {2, 4}, widths
print(f"node loss: {len(samples)} samples x 4 epochs trained once each, by 4 ranks and then by 2")
PY
    fi
  else
    fail "no progress before the node loss"
    show_log "$log"
  fi
  scancel "$job" "${next:-}" 2>/dev/null
  ((killed)) && { bash "$src/tests/slurm/cluster.sh" revive-node "$cluster" n2 || fail "n2 did not come back"; }
  ;;

diverge)
  out="$out_root/run"
  job=$(submit "$out" --set train.lr=1e30 --set train.warmup_steps=0 --set checkpoint.every_steps=1) ||
    fail "submit failed"
  wait_state "$job" 300 COMPLETED FAILED CANCELLED TIMEOUT || true
  log="$out/slurm-$job.out"
  [[ "$(state "$job")" == FAILED ]] || { fail "a diverging job ended $(state "$job")"; show_log "$log"; }
  [[ "$(field "$job" Restarts)" == 0 ]] || fail "a diverging job was requeued"
  grep -q "training diverged (exit 3)" "$log" || fail "the batch script did not name the divergence"
  grep -q "training diverged: step" "$log" || fail "the ranks did not name the divergence"
  ;;

srun_2x2 | mpirun_2x2)
  out="$out_root/run"
  extra=()
  type=sharded
  # mpirun_2x2 saves full checkpoints: writers on two hosts, so each unit is gathered to rank 0.
  [[ $scenario == mpirun_2x2 ]] && extra=(--set launch.launcher=mpirun --set "$mpirun_opts" --set fsdp.checkpoint_type=full) &&
    type=full
  job=$(submit "$out" "${extra[@]}") || fail "submit failed: $(cat "$out_root/submit.err")"
  check_completed "$out" "$job" 4 "2 node(s) (n1, n2)" "$type"
  [[ $type == full ]] && ! grep -q "each unit is gathered to rank 0" "$out/slurm-$job.out" && fail "full checkpoints not gathered"
  [[ $scenario == mpirun_2x2 ]] && ! grep -q "starting the ranks: mpirun" "$out/slurm-$job.out" && fail "not started by mpirun"
  [[ $scenario == srun_2x2 ]] && ! grep -q "starting the ranks: srun --mpi=pmix" "$out/slurm-$job.out" && fail "not started by srun"
  # Every rank, on both nodes, allocates with tcmalloc (common/process_memory.h).
  [[ $(grep -l "malloc: tcmalloc (gperftools)" "$out"/logs/rank-*.log | wc -l) == 4 ]] ||
    fail "not every rank's malloc is tcmalloc: $(grep -h "malloc:" "$out"/logs/rank-*.log | sort | uniq -c)"
  ;;

mpirun_affinity)
  # Open MPI told nothing pins each of 2 ranks to a single core (and more to a shared socket). Every
  # node of this cluster sees the machine's cores: 2 CPUs per rank needs 2 of them.
  (($(nproc) >= 2)) || { echo "SKIP: $(nproc) CPU(s) on this machine, the test needs 2"; exit 0; }
  lo='launch.extra_mpirun_options=["--mca","btl","self,vader,tcp","--mca","btl_tcp_if_include","lo","--mca","oob_tcp_if_include","lo"]'
  affinity() { grep -o 'CPU affinity: [0-9]* CPU(s) ([0-9,-]*)' "$1" | tail -1 | sed 's/.*(\(.*\))/\1/'; }
  # Both layouts at once (2 of each node's 4 CPUs apiece): each job's ranks are checked on their own.
  declare -A jobs=()
  for layout in "1 2" "2 1"; do
    read -r per_node cpus <<<"$layout"
    jobs[$layout]=$(submit "$out_root/run-$per_node-$cpus" --set launch.launcher=mpirun --set "$lo" \
      --set slurm.ntasks_per_node="$per_node" --set slurm.cpus_per_task="$cpus" --set train.max_train_step=10 \
      --set checkpoint.every_steps=0) || fail "$layout: submit failed: $(cat "$out_root/submit.err")"
  done
  for layout in "1 2" "2 1"; do
    read -r per_node cpus <<<"$layout"
    out="$out_root/run-$per_node-$cpus"
    job=${jobs[$layout]}
    [[ -n "$job" ]] || continue
    wait_state "$job" 300 COMPLETED FAILED CANCELLED TIMEOUT || true
    [[ "$(state "$job")" == COMPLETED ]] || { fail "$layout: job $job ended $(state "$job")"; show_log "$out/slurm-$job.out"; continue; }
    want="--map-by ppr:$per_node:node:PE=$cpus --use-hwthread-cpus --bind-to hwthread"
    grep -q -- "starting the ranks: mpirun .*$want" "$out/slurm-$job.out" || fail "$layout: the launch line lacks $want"
    # A binding that covers every CPU the node has is reported as "not bound (or bound to all
    # available processors)"; the affinity each rank logs below is what the test holds.
    grep -Eq "MCW rank 0 (bound to|is not bound)" "$out/slurm-$job.out" || fail "$layout: Open MPI did not report the bindings"
    declare -A seen=()
    for ((r = 0; r < 2 * per_node; r++)); do
      log=$(printf '%s/logs/rank-%05d.log' "$out" "$r")
      got=$(affinity "$log")
      n=$(grep -o 'CPU affinity: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
      [[ "$n" == "$cpus" ]] || fail "$layout: rank $r may run on ${n:-?} CPU(s) ($got), not cpus_per_task = $cpus"
      node=$((r / per_node))
      [[ -z "${seen[$node:$got]:-}" ]] || fail "$layout: ranks ${seen[$node:$got]} and $r share CPUs $got on one node"
      seen[$node:$got]=$r
    done
    unset seen
    echo "$per_node rank(s) per node x $cpus CPU(s): $(for ((r = 0; r < 2 * per_node; r++)); do printf 'rank %d on %s; ' "$r" "$(affinity "$(printf '%s/logs/rank-%05d.log' "$out" "$r")")"; done)"
  done
  ;;

hsdp)
  out="$out_root/run"
  job=$(submit "$out" --set fsdp.sharding_strategy=HYBRID_SHARD) || fail "submit failed"
  check_completed "$out" "$job" 4 "2 node(s) (n1, n2)"
  grep -q "HYBRID_SHARD: 2 shard group(s) of 2 rank(s), replicated 2x" "$out/slurm-$job.out" || fail "not 2 shard groups of 2"
  grep -q "shard group 0: ranks 0-1 on n1" "$out/slurm-$job.out" || fail "shard group 0 is not node n1"
  grep -q "shard group 1: ranks 2-3 on n2" "$out/slurm-$job.out" || fail "shard group 1 is not node n2"
  ;;

requeue)
  # The same job twice: stopped by USR1 (what Slurm sends at the time limit's lead, or on
  # preemption), requeued and resumed; and straight through. Final parameters and moments must be
  # bitwise equal: same world size, same data order, and with the step scheduler the learning rate
  # does not depend on where the run ends. The stopped job runs on a budget of 100000 steps until
  # the signal; while it waits requeued, it gets the straight run's end, 40 steps past the stop,
  # and the two run side by side. The stopped job saves every 5 steps in the background
  # ([checkpoint] async), each write held back 3 s: the signal goes as soon as a save has begun (its
  # line in the rank log), so it lands with that save in flight, and the stop must wait for it,
  # commit it, then save its own step.
  common=(--set fsdp.save_optimizer=true --set train.lr_scheduler=step)
  out="$out_root/stopped"
  job=$(SHARDTUNE_TEST_SAVE_DELAY_S=write:3 submit "$out" "${common[@]}" --set train.max_train_step=100000 \
    --set checkpoint.async=true --set checkpoint.every_steps=5) || fail "submit failed"
  wait_steps "$out" 12 120 || fail "no progress"
  begun() { grep -cs "written (the next optimizer update waits until it is read) in the background" "$out/logs/rank-00000.log"; }
  saves=$(begun)
  deadline=$((SECONDS + 120))
  while (($(begun) == saves && SECONDS < deadline)); do sleep 0.1; done
  scancel --signal=USR1 --batch "$job"
  wait_state "$job" 120 PENDING || { fail "not requeued"; show_log "$out/slurm-$job.out"; }
  [[ "$(field "$job" Restarts)" == 1 ]] || fail "restarts = $(field "$job" Restarts), expected 1"
  stopped_at=$(readlink "$out/checkpoints/latest" || echo step-0)
  stopped_at=$((10#${stopped_at#step-}))
  end=$((stopped_at + 40))
  set_max_step "$out" "$end" || fail "could not set the end of the stopped job"
  straight=$(submit "$out_root/straight" "${common[@]}" --set train.max_train_step="$end") || fail "submit failed"
  start_now "$job"
  wait_state "$straight" 300 COMPLETED FAILED CANCELLED || true
  [[ "$(state "$straight")" == COMPLETED ]] || fail "the straight run ended $(state "$straight")"
  wait_state "$job" 300 COMPLETED FAILED CANCELLED || true
  [[ "$(state "$job")" == COMPLETED ]] || { fail "the requeued job ended $(state "$job")"; show_log "$out/slurm-$job.out"; }
  log="$out/slurm-$job.out"
  grep -q "received SIGUSR1" "$log" || fail "the batch script did not see USR1"
  grep -q "signal 10 asked the job to stop" "$log" || fail "the ranks did not stop on the signal"
  grep -q "waiting for the checkpoint of step [0-9]*, written in the background, before stopping" "$log" ||
    fail "no save was in flight at the stop"
  grep -q "requeueing job $job (1 of 3)" "$log" || fail "the batch script did not requeue"
  grep -q "(start 2)" "$log" || fail "no second start in the same log"
  grep -q "resuming at step $stopped_at " "$log" || fail "the second start did not resume from step $stopped_at"
  echo "stopped after step $stopped_at, requeued, resumed, finished at step $end"
  final=$(printf 'step-%07d' "$end")
  a=$(checkpoint_slices "$out_root/straight/checkpoints/$final") b=$(checkpoint_slices "$out/checkpoints/$final")
  [[ -n "$a" && "$a" == "$b" ]] || fail "final parameters differ from the uninterrupted run"
  [[ "$(echo "$a" | grep -c '^exp_avg ')" -gt 0 ]] || fail "no optimizer moments compared"
  ;;

time_limit)
  # Slurm itself sends USR1 signal_lead_s before the limit (its check runs every ~30 s, so the
  # signal comes 0-30 s after the lead time). Nothing here depends on the machine's speed: the
  # first start cannot finish 100000 steps before its 1-minute limit on any machine, so it always
  # ends by the limit's signal; the requeued start then has 20 steps left (the resolved job that
  # the batch script re-reads is edited while the job waits) and a limit long enough for them on
  # any machine, so it always completes.
  out="$out_root/run"
  job=$(submit "$out" --set slurm.time=1 --set slurm.signal_lead_s=45 --set train.max_train_step=100000 \
    --set checkpoint.every_steps=0) || fail "submit failed"
  wait_requeued "$job" 1 300
  log="$out/slurm-$job.out"
  if [[ "$s" != PENDING ]]; then
    fail "the job is $s, not requeued by its time limit"
    show_log "$log"
  else
    first=$(readlink "$out/checkpoints/latest")
    first=$((10#${first#step-}))
    set_max_step "$out" $((first + 20)) || fail "could not set the remaining steps"
    scontrol update JobId="$job" TimeLimit=15
    start_now "$job"
    wait_state "$job" 300 COMPLETED FAILED CANCELLED TIMEOUT || true
    s=$(state "$job")
    [[ "$s" == COMPLETED ]] || { fail "the requeued job ended $s"; show_log "$log"; }
    grep -q "received SIGUSR1" "$log" || fail "Slurm's time-limit signal did not arrive"
    grep -q "checkpoint at step $first: requeueing job $job" "$log" || fail "the job did not requeue itself at step $first"
    grep -q "resuming at step $first " "$log" || fail "the requeued job did not resume from step $first"
    [[ "$(readlink "$out/checkpoints/latest")" == "$(printf 'step-%07d' $((first + 20)))" ]] ||
      fail "no final checkpoint at step $((first + 20))"
    echo "time limit: signalled and requeued at step $first, resumed, completed at step $((first + 20))"
  fi
  ;;

early_signal)
  # srun's prolog runs on the batch node before the step starts and holds the launch until the
  # batch script has received the stop signal: on a machine of any speed, the signal arrives
  # before any rank could handle it. The ranks must get it once they are ready, checkpoint at
  # their next step boundary and exit for a requeue, which the batch script then asks for.
  out="$out_root/run"
  hold="$out_root/hold-launch.sh"
  printf '#!/bin/bash\nfor _ in $(seq 1200); do grep -qs "received SIGUSR1" %s/slurm-*.out && exit 0; sleep 0.1; done\n' \
    "$out" >"$hold"
  chmod +x "$hold"
  job=$(submit "$out" --set train.max_train_step=100000 --set checkpoint.every_steps=0 \
    --set "launch.extra_srun_options=[\"--prolog=$hold\"]") || fail "submit failed"
  log="$out/slurm-$job.out"
  deadline=$((SECONDS + 120))
  until grep -qs "starting the ranks" "$log" || ((SECONDS > deadline)); do sleep 0.2; done
  scancel --signal=USR1 --batch "$job"
  wait_requeued "$job" 1 300
  scancel "$job" 2>/dev/null
  [[ "$s" == PENDING ]] || { fail "the job is $s, not requeued after the early signal"; show_log "$log"; }
  grep -q "the ranks are still starting: the signal reaches them once they are ready" "$log" ||
    fail "the signal did not arrive before the ranks were ready"
  first=$(readlink "$out/checkpoints/latest" || echo step-0)
  first=$((10#${first#step-}))
  ((first >= 1)) || fail "no checkpoint after the early signal"
  grep -q "checkpoint at step $first: requeueing job $job" "$log" || fail "the job did not requeue itself at step $first"
  ls "$out"/.ranks-ready-* >/dev/null 2>&1 && fail "the ready file was left behind"
  ;;

requeue_stress)
  # STRESS_CYCLES (default 6: 3 of each kind; 20 for a soak by hand) rounds of: USR1 to the batch
  # shell -> checkpoint -> requeue -> resume. Odd rounds signal as soon as a start begins (before
  # its ranks can handle a signal), even rounds after it has made progress. Every round must
  # requeue with a newer checkpoint, and the steps in metrics.jsonl must run 1, 2, 3, ... with none
  # lost and none repeated.
  cycles=${STRESS_CYCLES:-6}
  out="$out_root/run"
  job=$(submit "$out" --set train.max_train_step=100000 --set checkpoint.every_steps=0 \
    --set slurm.max_requeues="$cycles") || fail "submit failed"
  log="$out/slurm-$job.out"
  last=0
  for ((i = 1; i <= cycles && failures == 0; i++)); do
    deadline=$((SECONDS + 180))
    until grep -qs "(start $i)" "$log" || ((SECONDS > deadline)); do sleep 0.2; done
    if ((i % 2 == 0)); then
      before=$(grep -c '"step":' "$out/metrics.jsonl" 2>/dev/null)
      wait_steps "$out" $((${before:-0} + 5)) 120 || fail "round $i: no progress"
    fi
    scancel --signal=USR1 --batch "$job"
    wait_requeued "$job" "$i" 300
    [[ "$s" == PENDING ]] || { fail "round $i: the job is $s, not requeued"; show_log "$log"; break; }
    now=$(readlink "$out/checkpoints/latest" || echo step-0)
    now=$((10#${now#step-}))
    ((now > last)) || fail "round $i: the checkpoint did not advance (step $now after step $last)"
    last=$now
    if ((i == cycles)); then
      set_max_step "$out" $((last + 10)) || fail "could not set the last round's end"
    fi
    start_now "$job"
  done
  if ((failures == 0)); then
    wait_state "$job" 300 COMPLETED FAILED CANCELLED || true
    [[ "$(state "$job")" == COMPLETED ]] || { fail "the last start ended $(state "$job")"; show_log "$log"; }
    [[ "$(grep -c "requeueing job $job" "$log")" == "$cycles" ]] || fail "not $cycles requeues"
    [[ "$(grep -c "resuming at step" "$log")" == "$cycles" ]] || fail "not $cycles resumes"
    $py - "$out/metrics.jsonl" $((last + 10)) <<'PY' || fail "steps were lost or repeated"
import json, sys
steps = [json.loads(line)["step"] for line in open(sys.argv[1]) if '"step":' in line]
assert steps == list(range(1, int(sys.argv[2]) + 1)), steps
print(f"{len(steps)} steps, each once, over the requeues")
PY
    echo "requeue stress: $cycles of $cycles requeues resumed; final step $((last + 10))"
  else
    scancel "$job" 2>/dev/null
  fi
  ;;

killed_after_stop)
  # Rank 0 SIGKILLs itself right after the stop's checkpoint is committed (the test-only kill
  # point): the ranks end by a signal, not with the requeue exit, yet nothing is lost, so the
  # batch script must still requeue (as it must when srun's --kill-on-bad-exit ends a rank that
  # was on its way out).
  out="$out_root/run"
  job=$(SHARDTUNE_TEST_KILL_AT='latest-updated@*:0' submit "$out" --set train.max_train_step=100000 \
    --set checkpoint.every_steps=0) || fail "submit failed"
  log="$out/slurm-$job.out"
  wait_steps "$out" 5 120 || fail "no progress"
  scancel --signal=USR1 --batch "$job"
  wait_requeued "$job" 1 300
  scancel "$job" 2>/dev/null
  [[ "$s" == PENDING ]] || { fail "the job is $s, not requeued"; show_log "$log"; }
  grep -q "after the stop signal, but checkpoint step [0-9]* is committed: requeueing as stopped" "$log" ||
    fail "the batch script did not explain the requeue"
  "$ckpt_tool" verify "$out/checkpoints/latest" >/dev/null || fail "the committed checkpoint does not verify"
  ;;

resize)
  # Stopped with no requeues allowed (on a budget of 100000 steps, which outlasts the signal on a
  # machine of any speed), then resubmitted as 1 node x 3 ranks to end 40 steps past the stop.
  out="$out_root/run"
  job=$(submit "$out" --set train.max_train_step=100000 --set slurm.max_requeues=0) || fail "submit failed"
  wait_steps "$out" 20 120 || fail "no progress"
  scancel --signal=USR1 --batch "$job"
  wait_state "$job" 120 FAILED COMPLETED CANCELLED PENDING || true
  [[ "$(state "$job")" == FAILED ]] || fail "the stopped job is $(state "$job"), expected FAILED (no requeue allowed)"
  grep -q "max_requeues = 0): not requeueing" "$out/slurm-$job.out" || fail "the batch script did not explain"
  at=$(readlink "$out/checkpoints/latest" || echo step-0)
  end=$((10#${at#step-} + 40))
  job2=$(submit "$out" --set train.max_train_step="$end" --set slurm.nodes=1 --set slurm.ntasks_per_node=3) ||
    fail "resubmit failed: $(tail -3 "$out_root/submit.err")"
  wait_state "$job2" 300 COMPLETED FAILED CANCELLED || true
  [[ "$(state "$job2")" == COMPLETED ]] || { fail "the resubmitted job ended $(state "$job2")"; show_log "$out/slurm-$job2.out"; }
  grep -q "job 'tiny-2x2': 3 ranks on 1 node(s)" "$out/slurm-$job2.out" || fail "not 3 ranks on 1 node"
  grep -q "resuming at step $((10#${at#step-})) " "$out/slurm-$job2.out" || fail "did not resume from $at"
  # max_train_step counts steps of the first start's global batch (16): 3 ranks (12) stop at sample
  # 16 x end as 2 x 2 would (the 40 steps' 640 samples end in a short step of 4), and the last
  # step's checkpoint is the newest.
  last=$($py - "$out/metrics.jsonl" "$end" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l]
end = int(sys.argv[2]) * 16
assert r[-1]["samples"][1] == end and r[-1]["samples"][1] - r[-1]["samples"][0] <= 12, r[-1]["samples"]
print(r[-1]["step"])
PY
) || fail "the resized job did not stop at sample $((16 * end))"
  [[ "$(readlink "$out/checkpoints/latest")" == "$(printf 'step-%07d' "${last:-0}")" ]] || fail "no final checkpoint at the last step"
  ;;

second_writer)
  # One writer per output directory. While a job trains, its own batch script submitted again by
  # hand fails at its start naming the running job, and `shardtune run` into the directory is
  # refused; the first job goes on untouched and completes.
  out="$out_root/run"
  job=$(submit "$out" --set train.max_train_step=300 --set checkpoint.every_steps=0) || fail "submit failed"
  wait_steps "$out" 20 120 || fail "no progress"
  toml_before=$(md5sum <"$out/job.toml")
  second=$(sbatch --parsable "$out/shardtune.sbatch") || fail "sbatch of the script by hand failed"
  wait_state "$second" 120 FAILED COMPLETED CANCELLED || true
  [[ "$(state "$second")" == FAILED ]] || fail "the second writer's job ended $(state "$second"), expected FAILED"
  grep -q "is in use by Slurm job $job, start 1 (batch script on n[12] pid [0-9]*), since .*: a second writer would corrupt its checkpoints; not starting" \
    "$out/slurm-$second.out" || { fail "the second writer's job does not name the first"; show_log "$out/slurm-$second.out"; }
  "$st" run "$src/tests/slurm/tiny-2x2.toml" --set "job.output_dir=$out" >/dev/null 2>"$out_root/run.err" &&
    fail "shardtune run into a running job's directory exited 0"
  grep -q "Slurm job $job of $out is still RUNNING" "$out_root/run.err" ||
    fail "shardtune run was not refused for the running job: $(cat "$out_root/run.err")"
  [[ "$(md5sum <"$out/job.toml")" == "$toml_before" ]] || fail "a refused writer changed job.toml"
  check_completed "$out" "$job" 4 "2 node(s)"
  ;;

kill9)
  # A checkpoint every 10 steps: two committed before the kill, which may land in a save.
  out="$out_root/run"
  job=$(submit "$out" --set train.max_train_step=100000 --set checkpoint.every_steps=10) || fail "submit failed"
  wait_steps "$out" 25 120 || fail "no progress"
  victim=$(pgrep -f "shardtune-rank $out/job.toml" | sed -n 3p)
  [[ -n "$victim" ]] || fail "no rank process found"
  committed=$(readlink "$out/checkpoints/latest")
  start=$SECONDS
  kill -9 "$victim"
  wait_state "$job" 60 FAILED COMPLETED CANCELLED || true
  took=$((SECONDS - start))
  [[ "$(state "$job")" == FAILED ]] || fail "job is $(state "$job") $took s after kill -9, expected FAILED within 60 s"
  echo "kill -9 of pid $victim: job FAILED after $took s"
  for _ in $(seq 1 10); do  # 2 s for the last processes to be reaped
    left=$(pgrep -af "shardtune-rank $out/job.toml")
    [[ -z "$left" ]] && break
    sleep 0.2
  done
  [[ -z "$left" ]] || fail "processes left: $left"
  grep -Eq "task [0-9]+: Killed" "$out/slurm-$job.out" || fail "the log does not name the killed rank"
  grep -q "the ranks failed (exit" "$out/slurm-$job.out" || fail "the batch script did not report the failure"
  latest=$(readlink "$out/checkpoints/latest")
  [[ -n "$latest" ]] || fail "no committed checkpoint"
  "$ckpt_tool" verify "$out/checkpoints/latest" >/dev/null || fail "the last committed checkpoint $latest is damaged"
  echo "last committed checkpoint $latest (was $committed at the kill) verifies"
  scancel "$job" 2>/dev/null  # whatever happened, nothing of it stays queued ahead of later scenarios
  ;;

stream)
  "$(dirname "$st")/shardtune-make-model" "$out_root/model" --layers 3 --dtype bf16 >/dev/null || fail "shardtune-make-model failed"
  declare -A jobs
  for mode in whole node rank0; do
    low_cpu=true readers=node
    [[ $mode == whole ]] && low_cpu=false
    [[ $mode == rank0 ]] && readers=rank0
    jobs[$mode]=$(submit "$out_root/$mode" --set model.preset=none --set "model.path=$out_root/model" \
      --set model.init=pretrained --set fsdp.low_cpu_fsdp=$low_cpu --set fsdp.load_readers=$readers \
      --set train.max_train_step=5 --set checkpoint.every_steps=0 --set metrics.log_every_steps=1) || fail "submit ($mode) failed: $(cat "$out_root/submit.err")"
  done
  for mode in whole node rank0; do
    job=${jobs[$mode]}
    wait_state "$job" 300 COMPLETED FAILED CANCELLED TIMEOUT || true
    [[ "$(state "$job")" == COMPLETED ]] || { fail "the $mode job ended $(state "$job")"; show_log "$out_root/$mode/slurm-$job.out"; }
    grep -q "job 'tiny-2x2': 4 ranks on 2 node(s) (n1, n2)" "$out_root/$mode/slurm-$job.out" || fail "$mode: not 4 ranks on n1, n2"
  done
  log() { cat "$out_root/$1/slurm-${jobs[$1]}.out"; }
  log node | grep -q "streaming the weights: one reader per node, .* 0 rank(s) served by messages" || fail "node: no per-node streaming"
  log rank0 | grep -q "streaming the weights: world rank 0 reads for every rank, .* 2 rank(s) served by messages" ||
    fail "rank0: the ranks of n2 were not served by messages"
  log whole | grep -q "streaming the weights" && fail "whole: streamed"
  losses() { sed 's/, "step_seconds".*//' "$out_root/$1/metrics.jsonl"; }
  [[ -s "$out_root/whole/metrics.jsonl" && "$(losses whole)" == "$(losses node)" ]] || fail "per-node streaming changed the losses"
  [[ "$(losses whole)" == "$(losses rank0)" ]] || fail "streaming from rank 0 changed the losses"
  echo "whole, per-node and rank-0 loading: $(wc -l <"$out_root/whole/metrics.jsonl") identical steps"
  ;;

lora | qlora)
  # Stopped (on a budget of 100000 steps, so its 2 epochs of 68 steps, until the signal), requeued
  # and resumed; and straight through, to the same end: step 75 (or 20 steps past a later stop),
  # past the epoch boundary (step 68) where the step scheduler lowers the learning rate. Set while
  # the stopped job waits requeued; the two then run side by side.
  out="$out_root/stopped"
  job=$(submit_lora "$out" --set train.max_train_step=100000) || fail "submit failed: $(cat "$out_root/submit.err")"
  wait_steps "$out" 20 120 || fail "no progress"
  scancel --signal=USR1 --batch "$job"
  wait_state "$job" 120 PENDING || { fail "not requeued"; show_log "$out/slurm-$job.out"; }
  stopped_at=$(readlink "$out/checkpoints/latest" || echo step-0)
  stopped_at=$((10#${stopped_at#step-}))
  end=$((stopped_at + 20 > 75 ? stopped_at + 20 : 75))
  set_max_step "$out" "$end" || fail "could not set the end of the stopped job"
  straight=$(submit_lora "$out_root/straight" --set train.max_train_step="$end") || fail "submit failed: $(cat "$out_root/submit.err")"
  start_now "$job"
  wait_state "$straight" 300 COMPLETED FAILED CANCELLED || true
  [[ "$(state "$straight")" == COMPLETED ]] || { fail "the straight run ended $(state "$straight")"; show_log "$out_root/straight/slurm-$straight.out"; }
  grep -q "job 'tiny-$scenario': 4 ranks on 2 node(s) (n1, n2)" "$out_root/straight/slurm-$straight.out" || fail "not 4 ranks on n1, n2"
  wait_state "$job" 300 COMPLETED FAILED CANCELLED || true
  [[ "$(state "$job")" == COMPLETED ]] || { fail "the requeued job ended $(state "$job")"; show_log "$out/slurm-$job.out"; }
  grep -q "signal 10 asked the job to stop" "$out/slurm-$job.out" || fail "the ranks did not stop on the signal"
  grep -q "resuming at step $stopped_at " "$out/slurm-$job.out" || fail "the second start did not resume from step $stopped_at"
  echo "stopped after step $stopped_at, requeued, resumed, finished at step $end"
  final=$(printf 'step-%07d' "$end")
  a=$(checkpoint_slices "$out_root/straight/checkpoints/$final") b=$(checkpoint_slices "$out/checkpoints/$final")
  [[ -n "$a" && "$a" == "$b" ]] || fail "the requeued run's adapters differ from the uninterrupted run's"
  [[ "$(echo "$a" | grep -c '^exp_avg .*lora_A')" -gt 0 ]] || fail "no adapter moments compared"
  echo "$a" | grep -v -q "lora_[AB]" && fail "the checkpoint holds more than the adapters"

  job2=$(submit_lora "$out" --set train.max_train_step=$((end + 10)) --set slurm.nodes=1 --set slurm.ntasks_per_node=3) ||
    fail "resubmit failed: $(tail -3 "$out_root/submit.err")"
  wait_state "$job2" 300 COMPLETED FAILED CANCELLED || true
  [[ "$(state "$job2")" == COMPLETED ]] || { fail "the 3-rank job ended $(state "$job2")"; show_log "$out/slurm-$job2.out"; }
  grep -q "job 'tiny-$scenario': 3 ranks on 1 node(s)" "$out/slurm-$job2.out" || fail "not 3 ranks on 1 node"
  grep -q "resuming at step $end " "$out/slurm-$job2.out" || fail "3 ranks did not resume from step $end"
  "$ckpt_tool" export-peft "$out/checkpoints/latest" "$out_root/peft" 2>/dev/null || fail "export-peft failed"
  "$ckpt_tool" merge-lora "$out/checkpoints/latest" "$src/configs/data/tiny-llama" "$out_root/merged" 2>/dev/null ||
    fail "merge-lora failed"
  ;;

hostile)
  bash "$src/tests/slurm/hostile_test.sh" "$st" "$src" "$out_root" || failures=$((failures + 1))
  ;;

*)
  echo "unknown scenario $scenario"
  exit 2
  ;;
esac

((failures == 0)) && echo "PASS: $scenario" || echo "$failures failure(s) in $scenario"
exit $((failures > 0))
