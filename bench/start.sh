#!/usr/bin/env bash
# What a program's start costs with the build's copy of libtorch_cpu.so (without the libraries it
# names but does not use: scripts/trim_torch_needed.py) against LibTorch's own, which
# LD_LIBRARY_PATH (searched before the programs' run path) puts back. Alternating, ROUNDS rounds:
#   - `shardtune-ckpt --help`: the start alone (CPU seconds of the process);
#   - `shardtune run configs/tiny-cpu.toml -n 2`, 5 steps: a short job, launcher, mpirun and ranks
#     (CPU seconds of the whole tree) and its wall time.
# Prints the medians and own ÷ copy.
# usage: bench/start.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
rounds=${2:-5}
copy=$(ls "$build"/torch-trimmed/libtorch_cpu.so.* 2>/dev/null | grep -v '\.source$' | head -1 || true)
[ -n "$copy" ] || { echo "bench/start.sh: $build has no trimmed libtorch_cpu.so (SHARDTUNE_TRIM_TORCH)" >&2; exit 1; }
own=$(dirname "$(cut -d' ' -f1 "$copy.source")")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"

cpu() {  # cpu CMD...: CPU seconds (user + system) of CMD and every descendant it waited for
  /usr/bin/python3 -c '
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{r.ru_utime + r.ru_stime:.3f}")' "$@"
}
help_cpu() { cpu env ${1:+LD_LIBRARY_PATH=$1} "$build/bin/shardtune-ckpt" --help; }
job() {  # job [LIBDIR]: "cpu wall" of a 2-rank 5-step tiny job (wall in nanoseconds)
  rm -rf "$work/run"
  local t0 t1 c
  t0=$(date +%s%N)
  c=$(cpu env ${1:+LD_LIBRARY_PATH=$1} "$build/bin/shardtune" run configs/tiny-cpu.toml -n 2 \
        --set "job.output_dir=$work/run" --set train.max_train_step=5)
  t1=$(date +%s%N)
  [ -s "$work/run/metrics.jsonl" ] || { echo "bench/start.sh: the tiny job failed" >&2; exit 1; }
  echo "$c $((t1 - t0))"
}
: >"$work/rows"
for ((i = 0; i < rounds; i++)); do
  echo "help $(help_cpu "$own") $(help_cpu "")" >>"$work/rows"
  read -r oc ow <<<"$(job "$own")"
  read -r cc cw <<<"$(job "")"
  echo "job $oc $cc $ow $cw" >>"$work/rows"
done
/usr/bin/python3 - "$work/rows" "$rounds" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
col = lambda kind, i: statistics.median(float(r[i]) for r in rows if r[0] == kind)
print(f"shardtune-ckpt --help, CPU s: LibTorch's own {col('help', 1):.3f}, the copy {col('help', 2):.3f}; "
      f"own / copy {col('help', 1) / col('help', 2):.2f}")
print(f"2-rank 5-step tiny job, CPU s: own {col('job', 1):.3f}, copy {col('job', 2):.3f}; "
      f"own / copy {col('job', 1) / col('job', 2):.2f}")
print(f"2-rank 5-step tiny job, wall s: own {col('job', 3) / 1e9:.3f}, copy {col('job', 4) / 1e9:.3f}; "
      f"own / copy {col('job', 3) / col('job', 4):.2f}   (medians of {sys.argv[2]} rounds)")
PY
