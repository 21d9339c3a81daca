#!/usr/bin/env bash
# What the choice of threads per rank is worth: train_bench (fp32, FULL_SHARD) at 1, 2 and 4 ranks
# on this machine, with the libraries' own thread counts (--threads -1: what ranks did before they
# chose) and with each rank's share of the node (--threads 0: what jobs do), alternating in the same
# run. Prints tokens/s of each and the ratio. The model: bench/cpu_model.sh's 0.12B Llama, context
# SEQ, MICRO_BATCH rows per rank.
# usage: bench/threads.sh [BUILD_DIR] [WORK_DIR] [SEQ] [MICRO_BATCH] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=${2:-/var/tmp/shardtune-cpu-peer}
seq=${3:-256}
mb=${4:-1}
steps=${5:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS
"$root/bench/cpu_model.sh" "$build" "$work"
field() { /usr/bin/python3 -c "import json,sys; d=json.loads([l for l in sys.stdin if l.startswith('{')][-1]); print(d['$1'])"; }
echo "cores: $(nproc); seq $seq, $mb row(s) per rank, $steps steps"
printf '%-6s %-26s %10s   %-26s %10s %8s\n' ranks "before: threads" "tokens/s" "after: threads" "tokens/s" ratio
for np in 1 2 4; do
  declare -A tps=() why=()
  for threads in -1 0; do
    out=$(mpirun -np "$np" --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
      "$build/bin/train_bench" "$work/model" --device cpu --fp32 --seq "$seq" --micro-batch "$mb" \
      --steps "$steps" --warmup 1 --threads "$threads" 2>/dev/null)
    tps[$threads]=$(field tokens_per_s <<<"$out")
    why[$threads]="LibTorch $(field threads <<<"$out"), OpenBLAS $(field blas_threads <<<"$out")"
  done
  printf '%-6s %-26s %10.1f   %-26s %10.1f %8.2f\n' "$np" "${why[-1]}" "${tps[-1]}" "${why[0]}" "${tps[0]}" \
    "$(awk -v a="${tps[0]}" -v b="${tps[-1]}" 'BEGIN { print a / b }')"
done
