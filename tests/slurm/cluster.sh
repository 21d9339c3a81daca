#!/usr/bin/env bash
# A real Slurm cluster on this machine, for tests and the README demo: munged, slurmctld and N
# slurmd "nodes" (n1..nN). Each node runs in its own PID, mount and UTS namespace with its own
# hostname, /tmp and /dev/shm, so PMIx and Open MPI's shared memory behave as on separate hosts.
# Every daemon listens on 127.0.0.1 on its own port. All state lives under DIR (never under
# /tmp, which each node has privately).
#
#   cluster.sh start DIR [NODES]   start (default 2 nodes, 4 CPUs each); prints `export SLURM_CONF=...`
#   cluster.sh stop DIR            stop everything started for DIR, jobs included
#   cluster.sh kill-node DIR NAME  kill every process of node NAME at once (a lost machine)
#   cluster.sh revive-node DIR NAME   start it again and return it to service
#
# Stopping kills each node's namespace as a whole, so no process of any job outlives the cluster.
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 1; }

free_port_block() {  # prints a base port with NODES+1 consecutive free ports on 127.0.0.1
  local need=$1 base p ok
  for _ in $(seq 1 200); do
    base=$(( 20000 + (RANDOM % 2000) * 16 ))
    ok=1
    for p in $(seq "$base" $(( base + need - 1 ))); do
      if [[ -n "$(ss -Htln "sport = :$p")" ]]; then ok=0; break; fi
    done
    if (( ok )); then echo "$base"; return; fi
  done
  die "no free block of $need ports between 20000 and 52000"
}

write_conf() {
  local dir=$1 nodes=$2 base=$3 n
  cat >"$dir/slurm.conf" <<EOF
ClusterName=shardtune-test
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=${base}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${dir}/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=${dir}/state
SlurmdSpoolDir=${dir}/spool/%n
SlurmctldPidFile=${dir}/run/slurmctld.pid
SlurmdPidFile=${dir}/run/slurmd-%n.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# A submitted or requeued-and-started job is scheduled at slurmctld's next 1-second tick, not up
# to 3 s later (batch_sched_delay's default): the scenarios submit about 40 jobs one after another.
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
ReturnToService=2
JobRequeue=1
# SIGTERM to SIGKILL. It bounds how long ranks blocked in a collective with a dead peer survive
# (srun --kill-on-bad-exit waits KillWait + 2 s for them): kill -9 of a rank, a lost node. It is
# also all the time a batch script has after Slurm cancels its job (a node failure slurmctld found
# before the ranks did): 2 s left the script no time to resubmit the job without the lost node.
KillWait=10
MinJobAge=600
InactiveLimit=0
SlurmdTimeout=60
SlurmctldTimeout=60
MessageTimeout=30
TmpFS=/tmp
# Nodes of 4 CPUs on whatever this machine has: ranks may share cores.
SlurmdParameters=config_overrides
EOF
  for n in $(seq 1 "$nodes"); do
    echo "NodeName=n${n} NodeHostname=localhost NodeAddr=127.0.0.1 Port=$(( base + n )) CPUs=4 RealMemory=4000 State=UNKNOWN" \
      >>"$dir/slurm.conf"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >>"$dir/slurm.conf"
  # PMIx fences through the ring algorithm only. With the default ("mixed"), a fence that
  # collects no data takes the tree algorithm, and here every node's slurmstepd takes itself for
  # the tree's root with no children: MPI_Init's final barrier then returns on one node before
  # the other node has even reached it, and a rank whose first message arrives while its peer is
  # still inside MPI_Init kills that peer (SIGSEGV in Open MPI's TCP transport). Traced with a
  # shim around PMIx_Fence_nb: the barrier completed early in every launch with the tree, in none
  # with the ring.
  echo "PMIxCollFence=ring" >"$dir/mpi.conf"
}

# A node in namespaces of its own. Its init is bash: it reaps orphans (slurmstepd daemonizes), and
# when it dies the kernel kills every process in the node's PID namespace (kill_node).
start_node() {  # start_node DIR NAME
  local dir=$1 name=$2
  setsid unshare --pid --fork --kill-child --mount --uts --propagation private \
    bash -c 'set -e
             hostname "$1"
             mount -t proc proc /proc
             mount -t tmpfs -o mode=1777 tmpfs /tmp
             mount -t tmpfs -o mode=1777 tmpfs /dev/shm
             /usr/sbin/slurmd -D -f "$2" -N "$1" &
             trap "kill -TERM $! 2>/dev/null" TERM
             while kill -0 $! 2>/dev/null; do wait || true; done' \
    node "$name" "$dir/slurm.conf" >>"$dir/log/node-$name.out" 2>&1 </dev/null &
  echo $! >"$dir/run/node-$name.pid"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local seconds=$1 what=$2; shift 2
  local deadline=$(( SECONDS + seconds ))
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || return 1
    sleep 0.5
  done
}

start() {
  local dir=$1 nodes=${2:-2}
  [[ "$dir" = /* ]] || dir="$PWD/$dir"
  case "$dir" in /tmp/*|/dev/shm/*) die "DIR must not be under /tmp or /dev/shm (each node has its own): $dir";; esac
  [[ -e "$dir/run/cluster.env" ]] && die "a cluster already runs in $dir (stop it first)"
  for exe in munged mungekey slurmctld slurmd unshare ss; do
    command -v "$exe" >/dev/null || [[ -x "/usr/sbin/$exe" ]] || die "$exe is not installed (scripts/setup.sh installs it)"
  done
  rm -rf "$dir"/{state,spool,log}  # a fresh cluster: no jobs or node states of an earlier one
  mkdir -p "$dir"/{munge,state,run,log}
  chmod 0700 "$dir/munge"
  for n in $(seq 1 "$nodes"); do mkdir -p "$dir/spool/n$n"; done
  local base
  base=$(free_port_block $(( nodes + 1 )))
  write_conf "$dir" "$nodes" "$base"

  /usr/sbin/mungekey --create --force --keyfile="$dir/munge/munge.key" >/dev/null
  /usr/sbin/munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed"
  wait_for 10 munged test -S "$dir/munge/munge.socket" || die "munged did not start: $(tail -3 "$dir/log/munged.log")"

  export SLURM_CONF="$dir/slurm.conf"
  /usr/sbin/slurmctld -f "$SLURM_CONF" -i ||
    { tail -5 "$dir/log/slurmctld.log" >&2; stop "$dir"; die "slurmctld did not start"; }
  for n in $(seq 1 "$nodes"); do start_node "$dir" "n$n"; done
  echo "export SLURM_CONF=$SLURM_CONF" >"$dir/run/cluster.env"
  if ! wait_for 60 "nodes idle" bash -c "[[ \$(sinfo -h -N -t idle -o %N | sort -u | wc -l) -eq $nodes ]]"; then
    sinfo -N >&2 || true
    tail -5 "$dir"/log/*.log >&2 || true
    stop "$dir"
    die "the $nodes nodes did not become idle within 60 s"
  fi
  echo "export SLURM_CONF=$SLURM_CONF"
}

kill_pidfile() {  # kill_pidfile FILE SIGNAL
  local pid
  [[ -s "$1" ]] || return 0
  pid=$(cat "$1")
  kill "-$2" "$pid" 2>/dev/null || true
}

stop() {
  local dir=$1
  [[ "$dir" = /* ]] || dir="$PWD/$dir"
  export SLURM_CONF="$dir/slurm.conf"
  [[ -e "$SLURM_CONF" ]] && timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
  local f
  for f in "$dir"/run/node-*.pid; do kill_pidfile "$f" KILL; done   # unshare --kill-child: the namespace dies
  kill_pidfile "$dir/run/slurmctld.pid" TERM
  kill_pidfile "$dir/run/munged.pid" TERM
  for _ in $(seq 1 20); do
    local alive=0
    for f in "$dir/run/slurmctld.pid" "$dir/run/munged.pid"; do
      [[ -s "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
    done
    (( alive )) || break
    sleep 0.25
  done
  kill_pidfile "$dir/run/slurmctld.pid" KILL
  kill_pidfile "$dir/run/munged.pid" KILL
  rm -f "$dir/run/cluster.env" "$dir"/run/*.pid
}

# A node lost as a machine is lost: every process in its namespace (slurmd, job steps, ranks) killed
# at once. slurmctld finds out as it would about a real machine (SlurmdTimeout, failed launches).
kill_node() {  # kill_node DIR NAME
  local dir=$1 name=$2
  export SLURM_CONF="$dir/slurm.conf"
  kill_pidfile "$dir/run/node-$name.pid" KILL
  rm -f "$dir/run/node-$name.pid"
}

# The node back: its slurmd started again and returned to service.
revive_node() {  # revive_node DIR NAME
  local dir=$1 name=$2 before
  export SLURM_CONF="$dir/slurm.conf"
  # The new slurmd has registered once slurmctld shows its start time: a node marked DOWN by hand
  # before slurmctld found it not responding would otherwise look ready while its slurmd starts.
  before=$(scontrol show node -o "$name" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*') || true
  start_node "$dir" "$name"
  wait_for 30 "slurmd of $name" bash -c "scontrol show node -o $name | grep -v NOT_RESPONDING |
    grep -o 'SlurmdStartTime=[^ ]*' | grep -qvx '$before'" || true
  scontrol update NodeName="$name" State=RESUME 2>/dev/null || true
  wait_for 60 "$name idle" bash -c "sinfo -h -N -n $name -t idle -o %N | grep -q $name" ||
    die "$name did not come back: $(scontrol show node -o "$name")"
}

case "${1:-}" in
  start) [[ $# -ge 2 ]] || die "usage: cluster.sh start DIR [NODES]"; start "$2" "${3:-2}" ;;
  stop) [[ $# -eq 2 ]] || die "usage: cluster.sh stop DIR"; stop "$2" ;;
  kill-node) [[ $# -eq 3 ]] || die "usage: cluster.sh kill-node DIR NAME"; kill_node "$2" "$3" ;;
  revive-node) [[ $# -eq 3 ]] || die "usage: cluster.sh revive-node DIR NAME"; revive_node "$2" "$3" ;;
  *) die "usage: cluster.sh start DIR [NODES] | stop DIR | kill-node DIR NAME | revive-node DIR NAME" ;;
esac
