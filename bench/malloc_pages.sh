#!/usr/bin/env bash
# The ranks' malloc: tcmalloc, which shardtune-rank and train_bench link (common/process_memory.h),
# against glibc's (train_bench_glibc, the same program without it) with the huge pages
# (GLIBC_TUNABLES glibc.malloc.hugetlb=1) that `shardtune run` and the batch script give every
# process they start, and what those huge pages are worth to glibc's malloc, each figure against
# the same program with 4 KiB pages (glibc.malloc.hugetlb=0) in the same run:
#   - a start: the CPU time of loading LibTorch (`shardtune-ckpt --help`, the same libraries as a
#     rank), the mean of REPS starts;
#   - training: train_bench on tcmalloc, and train_bench_glibc under both settings (fp32,
#     FULL_SHARD) at world size 1 (all cores) and 2 (one thread per rank), and the PyTorch-eager peer (bench/torch_cpu_peer.py, foreach AdamW; DDP over gloo at
#     world size 2) under the same two settings, on bench/cpu_model.sh's 0.12B Llama, context SEQ,
#     MICRO_BATCH rows per rank. Settings alternate over ROUNDS rounds; each one's best round counts.
# Prints tokens/s and peak RSS (the largest rank's) of each, the ratios huge ÷ 4 KiB, and tcmalloc ÷
# glibc's malloc on huge pages.
# usage: bench/malloc_pages.sh [BUILD_DIR] [WORK_DIR] [SEQ] [MICRO_BATCH] [STEPS] [ROUNDS] [REPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=${2:-/var/tmp/shardtune-cpu-peer}
seq=${3:-256}
mb=${4:-4}
steps=${5:-4}
rounds=${6:-2}
reps=${7:-10}
py=/usr/bin/python3
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS
mpi=(mpirun --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
"$root/bench/cpu_model.sh" "$build" "$work" >/dev/null
json() { $py -c "import json,sys; d=json.loads([l for l in sys.stdin if l.startswith('{')][-1]); print(d['$1'])"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
declare -A setting=([small]=glibc.malloc.hugetlb=0 [huge]=glibc.malloc.hugetlb=1)

echo "cores: $cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"

# Starts: user + system CPU seconds of each, summed over REPS alternating starts.
declare -A start_cpu=([small]=0 [huge]=0)
for _ in $(seq "$reps"); do
  for s in small huge; do
    t=$({ GLIBC_TUNABLES=${setting[$s]} /usr/bin/time -f '%U %S' "$build/bin/shardtune-ckpt" --help >/dev/null; } 2>&1 |
      tail -1 | awk '{ print $1 + $2 }')
    start_cpu[$s]=$(awk -v a="${start_cpu[$s]}" -v b="$t" 'BEGIN { print a + b }')
  done
done
for s in small huge; do start_cpu[$s]=$(awk -v a="${start_cpu[$s]}" -v n="$reps" 'BEGIN { print a / n }'); done
printf 'start (LibTorch loaded): 4 KiB pages %.3f CPU s, huge pages %.3f CPU s; huge ÷ 4 KiB %s\n' \
  "${start_cpu[small]}" "${start_cpu[huge]}" "$(ratio "${start_cpu[huge]}" "${start_cpu[small]}")"

declare -A tps rss
run() {  # NAME SETTING, then the command (GLIBC_TUNABLES reaches it through mpirun's -x)
  local name=$1 s=$2 out t
  shift 2
  out=$("$@" 2>&1) || { echo "$name ($s) failed:"; echo "$out" | tail -20; exit 1; }
  t=$(json tokens_per_s <<<"$out")
  echo "  $name, $s pages: $(printf '%.1f' "$t") tokens/s, peak RSS $(printf '%.0f' "$(json peak_rss_mib <<<"$out")") MiB"
  if [ -z "${tps[$name.$s]:-}" ] || awk -v a="$t" -v b="${tps[$name.$s]}" 'BEGIN { exit !(a > b) }'; then
    tps[$name.$s]=$t
    rss[$name.$s]=$(json peak_rss_mib <<<"$out")
  fi
}
tb=(--device cpu --fp32 --seq "$seq" --micro-batch "$mb" --steps "$steps" --warmup 2)
peer=(--seq "$seq" --micro-batch "$mb" --steps "$steps" --warmup 2 --foreach)
echo "training: seq $seq, $mb rows per rank, $steps steps"
for r in $(seq "$rounds"); do
  echo "round $r"
  for s in small huge; do
    x=(-x "GLIBC_TUNABLES=${setting[$s]}")
    if [ "$s" = huge ]; then  # tcmalloc: no glibc setting applies
      run tcmalloc1 "$s" "${mpi[@]}" "${x[@]}" -np 1 "$build/bin/train_bench" "$work/model" "${tb[@]}"
      run tcmalloc2 "$s" "${mpi[@]}" "${x[@]}" -np 2 "$build/bin/train_bench" "$work/model" "${tb[@]}"
    fi
    run glibc1 "$s" "${mpi[@]}" "${x[@]}" -np 1 "$build/bin/train_bench_glibc" "$work/model" "${tb[@]}"
    run glibc2 "$s" "${mpi[@]}" "${x[@]}" -np 2 "$build/bin/train_bench_glibc" "$work/model" "${tb[@]}"
    run peer1 "$s" "${mpi[@]}" "${x[@]}" -np 1 $py "$root/bench/torch_cpu_peer.py" train "$work/model" "${peer[@]}" \
      --threads "$cores"
    run ddp2 "$s" "${mpi[@]}" "${x[@]}" -np 2 $py "$root/bench/torch_cpu_peer.py" train "$work/model" "${peer[@]}" \
      --threads 1
  done
done
echo
for name in glibc1 glibc2 peer1 ddp2; do
  printf '%-10s huge ÷ 4 KiB pages: tokens/s %s, peak RSS %s\n' "$name" \
    "$(ratio "${tps[$name.huge]}" "${tps[$name.small]}")" "$(ratio "${rss[$name.huge]}" "${rss[$name.small]}")"
done
for w in 1 2; do
  printf 'world %s: tcmalloc ÷ glibc on huge pages: tokens/s %s, peak RSS %s\n' "$w" \
    "$(ratio "${tps[tcmalloc$w.huge]}" "${tps[glibc$w.huge]}")" "$(ratio "${rss[tcmalloc$w.huge]}" "${rss[glibc$w.huge]}")"
done
