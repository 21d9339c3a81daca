#!/usr/bin/env bash
# The README's main job on a real Slurm cluster: starts munged, slurmctld and two slurmd nodes
# on this machine (tests/slurm/cluster.sh), submits configs/tiny-cluster.toml (or the job file
# given) with `shardtune submit`, follows it to the end, prints `shardtune status`, draws the run's
# charts with `shardtune plot` (RUN/plots/*.png), and stops the cluster. Needs root (namespaces)
# and a build (scripts/setup.sh).
# usage: scripts/demo.sh [JOB.toml] [--set section.key=value ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHARDTUNE_BUILD_DIR:-$root/build}
cluster=$build/demo-cluster
job=${1:-$root/configs/tiny-cluster.toml}
shift || true
st=$build/bin/shardtune
[[ -x $st ]] || { echo "demo.sh: $st is missing: run scripts/setup.sh first" >&2; exit 1; }

"$root/tests/slurm/cluster.sh" stop "$cluster" 2>/dev/null || true
"$root/tests/slurm/cluster.sh" start "$cluster" 2 >/dev/null
trap '"$root/tests/slurm/cluster.sh" stop "$cluster"' EXIT
export SLURM_CONF=$cluster/slurm.conf
sinfo -N

id=$("$st" submit "$job" "$@")
out=$("$st" validate "$job" "$@" 2>/dev/null | sed -n 's/^output_dir = "\(.*\)"$/\1/p' | head -1)
[[ $out = /* ]] || out=$PWD/$out
log=$out/slurm-$id.out
echo "demo.sh: job $id submitted; following $log"
for _ in $(seq 1 600); do
  state=$(scontrol show job -o "$id" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 1
done
grep -E "shardtune\[batch\]|ranks on|step [0-9]+/|checkpoint committed|done:" "$log" || true
echo
"$st" status "$out" --lines 3
[[ $state == COMPLETED ]]
echo
echo "demo.sh: charts of the run (loss, learning rate, tokens/s, memory):"
"$st" plot "$out"
