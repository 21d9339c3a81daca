#!/usr/bin/env bash
# shardtune's CPU training against PyTorch eager on the same LibTorch and BLAS (Debian's
# python3-torch), and against the machine's fp32 GEMM rate, all in one run:
#   - the machine's GEMM rate: torch.mm of 2048^3 on every core by one process, and by one process
#     per core at once (the sum); the larger is the reachable peak;
#   - world size 1: bench/torch_cpu_peer.py (AdamW's for-loop and foreach implementations) and
#     train_bench --fp32 on all cores;
#   - world size 2: the peer under DistributedDataParallel over gloo, and train_bench (FULL_SHARD and
#     NO_SHARD), one thread per rank;
# at a 0.12B-parameter Llama (12 blocks, hidden 768, 12 heads of 64, 4 KV heads, vocab 32000),
# context SEQ, MICRO_BATCH rows per rank per step, fp32. Engines alternate over ROUNDS rounds; each
# engine's best round counts. Prints tokens/s, peak RSS (the largest rank's) and the ratios.
# usage: bench/cpu_peer.sh [BUILD_DIR] [WORK_DIR] [SEQ] [MICRO_BATCH] [STEPS] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=${2:-/var/tmp/shardtune-cpu-peer}
seq=${3:-256}
mb=${4:-4}
steps=${5:-4}
rounds=${6:-2}
py=/usr/bin/python3
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
model=$work/model
"$root/bench/cpu_model.sh" "$build" "$work"
json() { $py -c "import json,sys; d=json.loads([l for l in sys.stdin if l.startswith('{')][-1]); print(d['$1'])"; }
best() { sort -g | tail -1; }

echo "cores: $cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); seq $seq, $mb rows per rank, $steps steps"
# The GEMM rate with 4 KiB pages and with huge pages for malloc (as shardtune's ranks run): the
# page size moves it on some machines (VMs above all), and the peak is the best of all four.
gemms=()
for pages in glibc.malloc.hugetlb=0 glibc.malloc.hugetlb=1; do
  gemm_one=$(GLIBC_TUNABLES=$pages $py "$root/bench/torch_cpu_peer.py" gemm --threads "$cores" | json gflops_per_s)
  gemm_each=$("${mpi[@]}" -x "GLIBC_TUNABLES=$pages" -np "$cores" $py "$root/bench/torch_cpu_peer.py" gemm --threads 1 |
    $py -c "import json,sys; print(sum(json.loads(l)['gflops_per_s'] for l in sys.stdin if l.startswith('{')))")
  gemms+=("$gemm_one" "$gemm_each")
  printf 'fp32 GEMM 2048^3 (%s): one process on %d threads %.1f GFLOP/s; %d processes of 1 thread %.1f GFLOP/s\n' \
    "$pages" "$cores" "$gemm_one" "$cores" "$gemm_each"
done
peak=$(printf '%s\n' "${gemms[@]}" | best)

declare -A tps rss gfs
run() {  # name, then the command; records the best tokens/s and the RSS and GFLOP/s of that round
  local name=$1 out t
  shift
  out=$("$@" 2>&1) || { echo "$name failed:"; echo "$out" | tail -20; exit 1; }
  t=$(json tokens_per_s <<<"$out")
  echo "  $name: $(printf '%.1f' "$t") tokens/s, peak RSS $(printf '%.0f' "$(json peak_rss_mib <<<"$out")") MiB"
  if [ -z "${tps[$name]:-}" ] || awk -v a="$t" -v b="${tps[$name]}" 'BEGIN { exit !(a > b) }'; then
    tps[$name]=$t
    rss[$name]=$(json peak_rss_mib <<<"$out")
    gfs[$name]=$(json gflops_per_s <<<"$out")
  fi
}
# shardtune's ranks run as `shardtune run` and the batch script start them, malloc on huge pages;
# the peer as python3 starts (bench/malloc_pages.sh measures both engines both ways).
tb=(--device cpu --fp32 --seq "$seq" --micro-batch "$mb" --steps "$steps" --warmup 2)
st_env=(-x GLIBC_TUNABLES=glibc.malloc.hugetlb=1)
peer=(--seq "$seq" --micro-batch "$mb" --steps "$steps" --warmup 2)
for r in $(seq 1 "$rounds"); do
  echo "round $r"
  run peer1 $py "$root/bench/torch_cpu_peer.py" train "$model" "${peer[@]}" --threads "$cores"
  run peer1_foreach $py "$root/bench/torch_cpu_peer.py" train "$model" "${peer[@]}" --threads "$cores" --foreach
  run shardtune1 "${mpi[@]}" "${st_env[@]}" -np 1 "$build/bin/train_bench" "$model" "${tb[@]}"
  run ddp2 "${mpi[@]}" -np 2 $py "$root/bench/torch_cpu_peer.py" train "$model" "${peer[@]}" --threads 1
  run ddp2_foreach "${mpi[@]}" -np 2 $py "$root/bench/torch_cpu_peer.py" train "$model" "${peer[@]}" --threads 1 --foreach
  run shardtune2 "${mpi[@]}" "${st_env[@]}" -np 2 "$build/bin/train_bench" "$model" "${tb[@]}"
  run shardtune2_noshard "${mpi[@]}" "${st_env[@]}" -np 2 "$build/bin/train_bench" "$model" "${tb[@]}" --strategy no_shard
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
pick() { [ "$(ratio "${tps[$1]}" "${tps[$2]}")" \> 1 ] && echo "$1" || echo "$2"; }
p1=$(pick peer1 peer1_foreach)
p2=$(pick ddp2 ddp2_foreach)
echo
echo "world 1: shardtune ÷ PyTorch eager ($p1) tokens/s $(ratio "${tps[shardtune1]}" "${tps[$p1]}"), peak RSS $(ratio "${rss[shardtune1]}" "${rss[$p1]}")"
echo "world 2: shardtune FULL_SHARD ÷ DDP ($p2) tokens/s $(ratio "${tps[shardtune2]}" "${tps[$p2]}"), peak RSS $(ratio "${rss[shardtune2]}" "${rss[$p2]}")"
echo "world 2: shardtune NO_SHARD ÷ DDP ($p2) tokens/s $(ratio "${tps[shardtune2_noshard]}" "${tps[$p2]}"), peak RSS $(ratio "${rss[shardtune2_noshard]}" "${rss[$p2]}")"
echo "world 2: training GFLOP/s ÷ GEMM rate: shardtune $(ratio "${gfs[shardtune2]}" "$peak"), PyTorch $(ratio "${gfs[$p2]}" "$peak")"
echo "world 1: training GFLOP/s ÷ GEMM rate: shardtune $(ratio "${gfs[shardtune1]}" "$peak"), PyTorch $(ratio "${gfs[$p1]}" "$peak")"
