#!/usr/bin/env bash
# What the fused AdamW is worth on the host, against AdamW an operation at a time, in the same run:
#  1. the optimizer step alone (adamw_bench.cpp) on the 0.12B Llama's flat parameters, with the
#     threads of one rank on this machine (OMP_NUM_THREADS=THREADS, default: the cores);
#  2. whole training steps of bench/cpu_model.sh's 0.12B Llama (train_bench, fp32, one rank,
#     sequence 256, one row), the two alternating, ROUNDS times (default 3). Prints tokens/s of
#     each and the ratio.
# Both under huge pages for malloc (GLIBC_TUNABLES glibc.malloc.hugetlb=1), as `shardtune run` starts ranks.
# usage: bench/adamw.sh [BUILD_DIR] [WORK_DIR] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=${2:-/var/tmp/shardtune-cpu-peer}
steps=${3:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 OMP_NUM_THREADS=${THREADS:-$(nproc)} "$build/bin/adamw_bench" 1 7
"$root/bench/cpu_model.sh" "$build" "$work"
field() { /usr/bin/python3 -c "import json,sys; d=json.loads([l for l in sys.stdin if l.startswith('{')][-1]); print(d['$1'])"; }
run() {
  mpirun -np 1 --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    -x GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \
    "$build/bin/train_bench" "$work/model" --device cpu --fp32 --seq 256 --micro-batch 1 --steps "$steps" --warmup 1 "$@" |
    field tokens_per_s
}
echo "training steps, 0.12B Llama, fp32, one rank, sequence 256, median of $steps steps:"
printf '%-8s %14s %14s %8s\n' round "ops tokens/s" "fused tokens/s" ratio
for round in $(seq "${ROUNDS:-3}"); do
  ops=$(run --adamw-ops)
  fused=$(run)
  printf '%-8s %14.1f %14.1f %8.3f\n' "$round" "$ops" "$fused" "$(/usr/bin/python3 -c "print($fused / $ops)")"
done
